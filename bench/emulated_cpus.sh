#!/usr/bin/env bash
# ringpipe on x86-64 CPUs this machine is not, through QEMU's user-mode
# emulator (Debian's qemu-user): an AVX2-only AMD Zen 3 (QEMU's EPYC-Milan
# model), an AVX2 Intel Haswell, and a Westmere without AVX. RINGPIPE_ISA
# lowers the ceiling on the host, but the CPU detection then still reads the
# host's CPUID; here every CPUID query answers as the emulated CPU, and an
# instruction it lacks stops the process with SIGILL.
#
# A portable build (-Dnative=false: plain C for the x86-64 baseline, the SIMD
# kernels chosen at run time; a -march=native build is for its own machine
# only) runs, under each CPU model:
#   - the x86-64 level glibc's loader reports for the model (v4 -> avx512,
#     v3 -> avx2, else scalar) against ringpipe's own detection;
#   - the unit tests of the instruction-set dispatch and its kernels;
#   - a 3-step training run of a tiny model (finite losses, no SIGILL);
#   - OPENBLAS_CORETYPE naming a core above the CPU (SkylakeX, or Haswell
#     without AVX2): refused at start-up with status 2, not an illegal
#     instruction in OpenBLAS's first call.
# The training and test runs leave OPENBLAS_CORETYPE unset (OpenBLAS then
# picks a core from the emulated CPUID): a value inherited from the host
# describes the host, not the model.
#
# Emulation runs SIMD code some hundreds of times slower than the host, so
# no timing here means anything; only the checks do. Status 0 when every
# check passed, 1 when one failed, 2 when qemu-user is missing.
#
# With FULL=1, the first model of CPUS (the Zen 3 by default) also runs,
# with ringpipe wrapped in the emulator, three of the suite's training tests
# (bf16_vs_fp32, thread_invariance, loss_falls) and seven 2-rank layouts
# against one rank, 4 steps each: dp 2, ZeRO-1 over dp 2, pp 2 under 1F1B and
# under ZB-H1 (whose split backward runs dinp and dweight apart), ring and
# Ulysses cp 2, and tp 2 with sequence parallelism (each GEMM on half the
# heads or features); then the context- and tensor-parallel MPI unit tests
# (cp_layout, cp_attention, cp_docs, tp_model) on 2 ranks: some 20 minutes
# more.
#
# With UNITS=1, the first model of CPUS also runs every other one-process
# test binary of the suite (the cmocka unit tests and the fuzz corpus
# replays: every test whose command is an executable of BUILD, with the
# suite's arguments and environment; the MPI ones are FULL's) under the
# emulator, each within UNIT_TIMEOUT seconds, and prints each one's result
# and time: more than an hour on 2 cores (kernels_fused_gelu alone runs past
# 20 minutes emulated, its OpenBLAS modes with threads). UNIT_SKIP names
# tests to leave out. It reads the suite's list with python3.
#
# Usage: bench/emulated_cpus.sh
# Knobs: CPUS ["EPYC-Milan Haswell Westmere"], BUILD [build-portable], QEMU [qemu-x86_64], FULL [0],
#        UNITS [0], UNIT_TIMEOUT [1800], UNIT_SKIP [""]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

CPUS=${CPUS:-EPYC-Milan Haswell Westmere}
BUILD=${BUILD:-build-portable}
QEMU=${QEMU:-qemu-x86_64}
LOADER=/lib64/ld-linux-x86-64.so.2
TESTS="kernels/test_kernels_isa kernels/test_kernels_gelu_isa kernels/test_kernels_xent_isa
       kernels/test_kernels_work_range kernels/test_kernels_matmul"

if ! command -v "$QEMU" >/dev/null 2>&1; then
  echo "emulated_cpus: $QEMU not found: install Debian's qemu-user (apt-get install qemu-user) and rerun" >&2
  exit 2
fi
if [ ! -x "$LOADER" ]; then
  echo "emulated_cpus: $LOADER not found: this script reads the emulated CPU's x86-64 level from glibc's loader" >&2
  exit 2
fi

if [ ! -d "$BUILD" ]; then
  echo "emulated_cpus: configuring the portable build in $BUILD (-Dnative=false)"
  meson setup "$BUILD" -Dnative=false >/dev/null || exit 1
fi
if grep -q -- "-march=native" "$BUILD/build.ninja" 2>/dev/null; then
  echo "emulated_cpus: $BUILD compiles with -march=native; give BUILD a directory set up with -Dnative=false" >&2
  exit 2
fi
echo "emulated_cpus: building what it runs in $BUILD"
targets=(ringpipe)
for t in $TESTS; do targets+=("tests/$t"); done
# FULL=1: the MPI unit tests it runs under the emulator, 2 ranks each
MPI_TESTS="cp/test_cp_layout cp/test_cp_attention cp/test_cp_docs tp/test_tp_model"
if [ "${FULL:-0}" = 1 ]; then
  targets+=(tests/pipeline/compare_runs)
  for t in $MPI_TESTS; do targets+=("tests/$t"); done
fi
if [ "${UNITS:-0}" = 1 ]; then
  if ! command -v python3 >/dev/null 2>&1; then
    echo "emulated_cpus: UNITS=1 reads the suite's test list with python3, which is missing: install python3 and rerun" >&2
    exit 2
  fi
  targets=() # every test binary: the whole build
fi
ninja -C "$BUILD" "${targets[@]}" >/dev/null || exit 1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() {
  echo "  FAIL: $*"
  failed=1
}

# The x86-64 level glibc finds for the model, as the ISA ringpipe should detect.
glibc_isa() {
  local help
  help=$("$QEMU" -cpu "$1" "$LOADER" --help 2>/dev/null)
  if grep -q "x86-64-v4 (supported" <<<"$help"; then echo avx512
  elif grep -q "x86-64-v3 (supported" <<<"$help"; then echo avx2
  else echo scalar
  fi
}

rows=""
for cpu in $CPUS; do
  echo "== $cpu"
  want=$(glibc_isa "$cpu")
  # ringpipe's own reading: the training header's "cpu X, ceiling X (cpu)"
  out="$work/train_$cpu"
  log=$(env -u OPENBLAS_CORETYPE -u RINGPIPE_ISA "$QEMU" -cpu "$cpu" "$BUILD/ringpipe" train \
    --layers 1 --channels 32 --heads 2 --seq 32 --batch 2 --steps 3 --eval-batches 1 \
    --sample-tokens 8 --out "$out" 2>&1 | grep -v "^qemu-x86_64: warning: TCG")
  rc=$? # pipefail: ringpipe's status unless it succeeded
  got=$(sed -n 's/.*instruction sets: cpu \([a-z0-9]*\), ceiling.*/\1/p' <<<"$log" | head -1)
  loss=$(sed -n 's/^done: .*final loss \([0-9.]*\).*/\1/p' <<<"$log" | head -1)
  [ "$rc" -eq 0 ] || fail "$cpu: ringpipe train exited $rc: $(tail -2 <<<"$log")"
  [ "$got" = "$want" ] || fail "$cpu: ringpipe detected cpu '$got', glibc's loader says $want"
  case "$loss" in
    "" | nan | inf) fail "$cpu: no finite final loss" ;;
  esac
  # the dispatch tests
  passed=0
  ntests=0
  for t in $TESTS; do
    ntests=$((ntests + 1))
    if env -u OPENBLAS_CORETYPE -u RINGPIPE_ISA "$QEMU" -cpu "$cpu" "$BUILD/tests/$t" >"$work/t.log" 2>&1; then
      passed=$((passed + 1))
    else
      fail "$cpu: $(basename "$t") failed: $(grep -E "FAILED|ERROR|signal" "$work/t.log" | grep -v "^qemu-x86_64: warning" | head -3 | tr '\n' ' ')"
    fi
  done
  # an OpenBLAS core above the CPU: refused with status 2
  above=SkylakeX
  [ "$want" = scalar ] && above=Haswell
  refused="-"
  if [ "$want" != avx512 ]; then
    rlog=$(env -u RINGPIPE_ISA OPENBLAS_CORETYPE=$above "$QEMU" -cpu "$cpu" "$BUILD/ringpipe" \
      train --steps 1 --out "$work/refused" 2>&1)
    rrc=$?
    if [ "$rrc" -eq 2 ] && grep -q "illegal instruction" <<<"$rlog"; then
      refused="$above: status 2"
    else
      refused="$above: status $rrc"
      fail "$cpu: OPENBLAS_CORETYPE=$above exited $rrc: $(grep -v "^qemu-x86_64: warning" <<<"$rlog" | tail -2 | tr '\n' ' ')"
    fi
  fi
  echo "  glibc: $want; ringpipe: ${got:-?}; train exit $rc, final loss ${loss:-?}; tests $passed/$ntests; $refused"
  rows="$rows| $cpu | $want | ${got:-?} | ${loss:-?} | $passed / $ntests | $refused |
"
done

# FULL=1: the suite's training and layout scripts over the emulated ringpipe
full_rows=""
if [ "${FULL:-0}" = 1 ]; then
  cpu=${CPUS%% *}
  build_abs=$(cd "$BUILD" && pwd)
  wrap="$work/ringpipe_$cpu"
  cat >"$wrap" <<EOW
#!/bin/bash
env -u OPENBLAS_CORETYPE -u RINGPIPE_ISA "$QEMU" -cpu "$cpu" "$build_abs/ringpipe" "\$@" \
  2> >(grep -v "^qemu-x86_64: warning: TCG" >&2)
EOW
  chmod +x "$wrap"
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  export OMPI_MCA_rmaps_base_oversubscribe=1 LAYOUT_STEPS=4
  compare="$build_abs/tests/pipeline/compare_runs"
  full_detail() { # log: the largest differences the check measured, or its loss
    awk '/worst relative difference/ {
           for (i = 1; i < NF; i++) if ($i == "difference") v = $(i + 1) + 0
           k = ($1 == "parameters:") ? "parameters" : ($1 == "first") ? "first 20 steps" : "losses"
           if (!(k in w) || v > w[k]) w[k] = v
         }
         /relative difference of the last-10 means/ { v = $7 + 0; if (v > m) m = v; seen = 1 }
         /^final validation loss/ { f = $4 }
         /\[  PASSED  \] [0-9]+ test/ { if ($4 + 0 > t) t = $4 + 0 }
         END {
           out = ""
           if ("first 20 steps" in w) out = sprintf("first 20 steps %.2g apart", w["first 20 steps"])
           if (seen) out = out sprintf(", last-10 means %.2g apart", m)
           if ("losses" in w) out = sprintf("losses %.2g apart", w["losses"])
           if ("parameters" in w) out = out sprintf(", parameters %.2g", w["parameters"])
           if (f != "") out = sprintf("validation loss %.4f", f)
           if (t > 0) out = t " cmocka tests on each rank"
           print out
         }' "$1"
  }
  full_check() { # name, then the script and its arguments
    local name=$1 t0 rc
    shift
    echo "== $cpu, $name (ringpipe under the emulator)"
    t0=$(date +%s)
    "$@" >"$work/$name.log" 2>&1
    rc=$?
    full_rows="$full_rows| $name | $([ "$rc" -eq 0 ] && echo passed || echo "FAILED ($rc)") | $(full_detail "$work/$name.log") | $(($(date +%s) - t0)) s |
"
    [ "$rc" -eq 0 ] || fail "$cpu: $name: $(tail -3 "$work/$name.log" | tr '\n' ' ')"
  }
  full_check bf16_vs_fp32 sh tests/train/bf16_loss.sh "$wrap" "$work/bf16"
  full_check thread_invariance sh tests/train/thread_invariance.sh "$wrap" "$compare" "$work/ti"
  full_check loss_falls sh tests/train/loss_falls.sh "$wrap" "$work/lf"
  for l in "dp2:--microbatches 4" "dp2_zero1:--microbatches 4 --zero 1" "pp2:--pp 2" \
    "pp2_zbh1:--pp 2 --schedule zb-h1" "cp2:--cp 2" "cp2_ulysses:--cp 2 --cp-impl ulysses" \
    "tp2_sp:--tp 2 --sp"; do
    # shellcheck disable=SC2086 # the layout's flags, split on purpose
    full_check "${l%%:*}" sh tests/pipeline/run_layout.sh "$wrap" "$compare" "$work/${l%%:*}" 2 \
      1e-5 1e-3 "" -- ${l#*:}
  done
  for t in $MPI_TESTS; do
    full_check "${t#*/test_}" mpirun -n 2 --oversubscribe --bind-to none --mca btl self,vader,tcp \
      env -u OPENBLAS_CORETYPE -u RINGPIPE_ISA "$QEMU" -cpu "$cpu" "$build_abs/tests/$t"
  done
fi

# UNITS=1: the suite's one-process test binaries, each under the emulator
# as `meson test` would run it (its arguments and environment, in BUILD)
unit_rows=""
if [ "${UNITS:-0}" = 1 ]; then
  cpu=${CPUS%% *}
  build_abs=$(cd "$BUILD" && pwd)
  skip=" "
  for t in $TESTS $MPI_TESTS; do skip="$skip$build_abs/tests/$t "; done
  # name, then the command line shell-quoted: its environment, the binary and its arguments
  meson introspect "$BUILD" --tests | python3 -c '
import json, shlex, sys
build, skip, names = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
for t in json.load(sys.stdin):
    exe = t["cmd"][0]
    if not exe.startswith(build + "/") or exe in skip or t["name"] in names:
        continue
    with open(exe, "rb") as f:
        if f.read(4) != b"\x7fELF":
            continue
    env = [k + "=" + v for k, v in sorted(t["env"].items())]
    print(t["name"] + "\t" + shlex.join(env) + "\t" + shlex.join(t["cmd"]))
' "$build_abs" "$skip" "${UNIT_SKIP:-}" >"$work/units.tsv" || exit 1
  nunits=$(wc -l <"$work/units.tsv")
  upassed=0
  i=0
  while IFS=$'\t' read -r name envs cmd; do
    i=$((i + 1))
    t0=$(date +%s)
    # shellcheck disable=SC2086 # envs and cmd are shell-quoted by python's shlex.join
    (cd "$build_abs" && eval "exec env -u OPENBLAS_CORETYPE -u RINGPIPE_ISA $envs timeout \
      ${UNIT_TIMEOUT:-1800} $QEMU -cpu $cpu $cmd") >"$work/unit.log" 2>&1 </dev/null
    rc=$?
    secs=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
      upassed=$((upassed + 1))
      echo "== $cpu, unit $i/$nunits $name: passed in $secs s"
    else
      why="exit $rc"
      [ "$rc" -eq 124 ] && why="timed out after ${UNIT_TIMEOUT:-1800} s"
      echo "== $cpu, unit $i/$nunits $name: FAILED ($why) in $secs s"
      fail "$cpu: unit $name: $why: $(grep -E "FAILED|ERROR|signal|Assert" "$work/unit.log" | grep -v "^qemu-x86_64: warning" | head -3 | tr '\n' ' ')"
      unit_rows="$unit_rows| $name | FAILED ($why) | $secs s |
"
    fi
  done <"$work/units.tsv"
  unit_summary="under $cpu: $upassed of $nunits one-process test binaries passed${UNIT_SKIP:+ (left out: $UNIT_SKIP)}"
fi

echo
echo "| QEMU CPU model | glibc's x86-64 level | ringpipe's cpu level | 3-step loss | dispatch tests | OpenBLAS core above the CPU |"
echo "| --- | --- | --- | --- | --- | --- |"
printf "%s" "$rows"
if [ -n "$full_rows" ]; then
  echo
  echo "| under ${CPUS%% *} | result | largest relative differences (or the loss) | time |"
  echo "| --- | --- | --- | --- |"
  printf "%s" "$full_rows"
fi
if [ "${UNITS:-0}" = 1 ]; then
  echo
  echo "$unit_summary"
  if [ -n "$unit_rows" ]; then
    echo "| test | result | time |"
    echo "| --- | --- | --- |"
    printf "%s" "$unit_rows"
  fi
fi
if [ "$failed" -ne 0 ]; then
  echo "emulated_cpus: some checks failed (above)"
  exit 1
fi
echo "emulated_cpus: every check passed"
