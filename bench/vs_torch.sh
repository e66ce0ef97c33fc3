#!/usr/bin/env bash
# ringpipe against PyTorch on the same shapes and threads, in alternating rounds:
# training tokens/s (ringpipe `bench train` vs PyTorch eager and torch.compile,
# bench/vs_torch.py) and causal / non-causal attention forward+backward (ringpipe
# flash vs PyTorch scaled_dot_product_attention). Prints per round and, per
# comparison, the median ratio with its min..max spread over the rounds, the
# same over each round's median steps (each side prints its per-step rates'
# median: one slow step moves a short run's mean), and the
# ratio of each side's best round (on a VM whose neighbours slow some rounds,
# the reading their noise touches least on either side), and
# (fp32) ringpipe's model FLOP/s over the FMA probe per round and their spread,
# as `bench train` prints it, both over the start-up probe and over the probe on
# all threads at once. Each round also gives the CPU time the hypervisor took
# during each side's run (/proc/stat's steal count, where the kernel has it):
# on a shared VM the side that lost time reads slow in that round, and the
# last line gives the whole run's. Steal misses the neighbours' use of the
# shared caches and memory, so before each side's run a GEMM check (`ringpipe
# bench fma`: the FMA probe, then one of the model's GEMM shapes, for
# CHECK_SECONDS each) gives both medians in GFLOP/s: a side whose checks read
# low ran on a busier machine (the probe alone low: its cores were shared;
# the GEMM alone: its caches and memory). They are snapshots: a burst that
# starts during a run goes unseen. Writes the tables to OUT_DIR/vs_torch.md.
# Its header says how the FMA probe holds up on all the threads at once for
# 3 s, the check on the fractions' denominator, and the GEMM check beside it.
#
# PyTorch comes from a virtual environment OUTSIDE the repository, created on
# first use (the CPU wheel index first, then PyPI). When it cannot be installed
# (no network, no wheel for this Python) the script says so and exits 0 without
# measuring anything.
#
# usage: bench/vs_torch.sh [OUT_DIR]        (default bench/results)
#
# Environment knobs (defaults in brackets):
#   RINGPIPE     the ringpipe binary [build/ringpipe]
#   TORCH_VENV   the virtual environment [$HOME/.cache/ringpipe/torch-venv]
#   PYTHON       the Python that creates it [python3]
#   THREADS      compute threads, both sides [2]
#   ROUNDS       alternating rounds [3]
#   STEPS        measured training steps per run (after 3 warm-up) [8]
#   MODELS       "default" and/or "gpt2" (124M shape T512 B4 vocab 50257: slow) [default] ("" skips training)
#   GEMMS        "yes" [default]: after each model's training rounds, its GEMM shapes
#                alone (`ringpipe bench gemm`: ringpipe's own GEMM and OpenBLAS
#                against torch.mm, PyTorch's BLAS, in alternating rounds, with the
#                fraction of the FMA probe each reaches, and torch.mm on one
#                2048^3 product: the best rate the BLAS gives on this machine,
#                which bounds the FMA fraction any step made of GEMMs can
#                reach); "" skips them
#   ATTN_T       attention sequence lengths ["1024 2048 4096 8192"] ("" skips attention)
#   ATTN_SECONDS each side's time per attention round, repeating forward+backward
#                (at least twice) and keeping its best [1]: at T = 4096 and up one
#                call takes 0.3-1.6 s, so 0.5 s gave two calls, and a burst of the
#                VM's neighbours over both read as that side's best
#   IMPLS        PyTorch training variants, of eager, compile (torch.compile's default
#                mode) and compile-max (its mode="max-autotune") ["eager compile"]
#   PRECISION    training precision, both sides: fp32, or bf16 (ringpipe --precision
#                bf16 against PyTorch autocast to bf16 on CPU: bf16 matmuls, fp32
#                weights and AdamW on both) [fp32]
#   ATTN_CLOCK   "wall" [default] or "cpu": with THREADS=1, time attention by this
#                thread's CPU time on both sides (build/bench/bench_flash_cpu and
#                vs_torch.py --cpu-time), steady on a machine shared with other jobs
#   ISA          "" [default: each side's best] or avx2: both sides held to AVX2, to
#                stand in for an AVX2-only CPU (Zen 3) on an AVX-512 one: ringpipe
#                under RINGPIPE_ISA=avx2 with its own GEMM (OpenBLAS could only be
#                held by OPENBLAS_CORETYPE, which no script here sets; on a real
#                AVX2 CPU auto's OpenBLAS split measured 5-10 % faster than the own
#                AVX2 GEMM, so this understates ringpipe), PyTorch under
#                ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2 and
#                ONEDNN_MAX_CPU_ISA=AVX2
#   GEMM         ringpipe's --gemm [auto; own under ISA=avx2]
#   CHECK_SECONDS  seconds of the FMA probe and of the GEMM check before each
#                side's run (training: the model's MLP shape; attention: the
#                default model's) [0.5] (0: no checks)
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
TORCH_VENV=${TORCH_VENV:-$HOME/.cache/ringpipe/torch-venv}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-8}
MODELS=${MODELS-default}
ATTN_T=${ATTN_T-1024 2048 4096 8192}
GEMMS=${GEMMS-yes}
IMPLS=${IMPLS:-eager compile}
for impl in $IMPLS; do
  case $impl in eager|compile|compile-max) ;; *)
    echo "vs_torch: IMPLS has '$impl': use eager, compile and/or compile-max" >&2; exit 2 ;;
  esac
done
PRECISION=${PRECISION:-fp32}
case $PRECISION in fp32|bf16) ;; *)
  echo "vs_torch: PRECISION=$PRECISION: use fp32 or bf16" >&2; exit 2 ;;
esac
ISA=${ISA:-}
case $ISA in
  "") GEMM=${GEMM:-auto} ;;
  avx2) GEMM=${GEMM:-own}
        export RINGPIPE_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
               ONEDNN_MAX_CPU_ISA=AVX2 ;;
  *) echo "vs_torch: ISA=$ISA: use avx2, or leave it empty for each side's best" >&2; exit 2 ;;
esac
case $GEMM in auto|blas|split|own) ;; *)
  echo "vs_torch: GEMM=$GEMM: use auto, blas, split or own" >&2; exit 2 ;;
esac
# 0 when $1 is a number of seconds in 0.01..60
seconds_ok() { awk -v s="$1" 'BEGIN { exit !(s ~ /^[0-9.]+$/ && s >= 0.01 && s <= 60) }'; }
CHECK_SECONDS=${CHECK_SECONDS:-0.5}
if [ "$CHECK_SECONDS" != 0 ] && ! seconds_ok "$CHECK_SECONDS"; then
  echo "vs_torch: CHECK_SECONDS=$CHECK_SECONDS: use 0 (no checks) or seconds in 0.01..60" >&2
  exit 2
fi
ATTN_SECONDS=${ATTN_SECONDS:-1}
if ! seconds_ok "$ATTN_SECONDS"; then
  echo "vs_torch: ATTN_SECONDS=$ATTN_SECONDS: use seconds in 0.01..60" >&2
  exit 2
fi
ATTN_CLOCK=${ATTN_CLOCK:-wall}
case $ATTN_CLOCK in
  wall) ;;
  cpu) [ "$THREADS" = 1 ] || { echo "vs_torch: ATTN_CLOCK=cpu needs THREADS=1 (it times one thread)" >&2; exit 2; }
       FLASH_CPU=${FLASH_CPU:-$(dirname "$RINGPIPE")/bench/bench_flash_cpu}
       [ -x "$FLASH_CPU" ] || { echo "vs_torch: $FLASH_CPU not found; build first (ninja -C build) or set FLASH_CPU" >&2; exit 2; } ;;
  *) echo "vs_torch: ATTN_CLOCK=$ATTN_CLOCK unknown; use wall or cpu" >&2; exit 2 ;;
esac
PYBENCH=$PWD/bench/vs_torch.py

case $TORCH_VENV in "$PWD"/*)
  echo "vs_torch: TORCH_VENV=$TORCH_VENV is inside the repository; choose a directory outside it" >&2
  exit 2 ;;
esac
[ -x "$RINGPIPE" ] || { echo "vs_torch: $RINGPIPE not found; build first (ninja -C build) or set RINGPIPE" >&2; exit 2; }

# ---- PyTorch in its own virtual environment
have_torch() { [ -x "$TORCH_VENV/bin/python" ] && "$TORCH_VENV/bin/python" -c 'import torch' 2>/dev/null; }
if ! have_torch; then
  echo "vs_torch: installing PyTorch (CPU) into $TORCH_VENV (outside the repository) ..."
  mkdir -p "$(dirname "$TORCH_VENV")"
  if ! "$PYTHON" -m venv "$TORCH_VENV" >/dev/null 2>&1; then
    echo "vs_torch: skipped: '$PYTHON -m venv' failed (install python3-venv); nothing measured"
    exit 0
  fi
  "$TORCH_VENV/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu torch numpy \
    >/dev/null 2>&1 || "$TORCH_VENV/bin/pip" install -q torch numpy >/dev/null 2>&1 || true
  if ! have_torch; then
    echo "vs_torch: skipped: PyTorch could not be installed into $TORCH_VENV (no network or no"
    echo "  wheel for this Python); nothing measured. Install it there by hand and run again."
    exit 0
  fi
fi
TPY="$TORCH_VENV/bin/python"
mkdir -p "$OUT"
report=$OUT/vs_torch.md
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
tver=$("$TPY" -c 'import torch; print(torch.__version__)')
tisa=$("$TPY" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())' 2>/dev/null || echo "?")
isa=$("$RINGPIPE" bench train --steps 1 --layers 1 --channels 64 --heads 1 --seq 16 --batch 1 \
      --no-measure-peak 2>/dev/null | sed -n 's/^  instruction sets: //p')
# the FMA probe every "of the FMA probe" column divides by, held up to all the
# threads at once for 3 s (ringpipe bench fma): is it what they reach together?
fma_out=$("$RINGPIPE" bench fma --seconds 3 --threads "$THREADS" --gemm "$GEMM" 2>&1 || true)
fma_check=$(echo "$fma_out" | sed -n 's/^  all threads at once, the sum of their medians: \(.*\)$/\1/p')
# the GEMM check's median and the FMA probe's sum of medians before it:
# "GEMM_GFLOPS PROBE_GFLOPS"
check_figures() {
  awk '/^  all threads at once, the sum of their medians: / { p = $10 }
       /^GEMM check:/ { c = 1 } c && $1 ~ /^[0-9]+$/ && NF == 5 { m = $4 }
       END { if (m != "" && p != "") printf "%s %s", m, p }'
}
gemm_head=$(echo "$fma_out" | check_figures)
gemm_head_text="not measured"
[ -n "$gemm_head" ] && gemm_head_text="${gemm_head% *} GFLOP/s median"
{
  echo "# ringpipe vs PyTorch $tver"
  echo
  echo "CPU: $cpu, $THREADS threads each; ringpipe (--gemm $GEMM): $isa; PyTorch kernels: $tisa${ISA:+ (ISA=$ISA: MKL and oneDNN held to AVX2)}"
  echo "FMA probe check (\`ringpipe bench fma --seconds 3\`, all $THREADS threads at once, the sum of their medians): ${fma_check:-not measured (no SIMD probe here)}"
  echo "GEMM check beside it (the default model's MLP, 1024 x 384 -> 1536, forward + backward, 3 s): $gemm_head_text"
  echo "Rounds: $ROUNDS, alternating (ringpipe, then each PyTorch variant, in every round)."
  echo
} | tee "$report"

# The hypervisor's steal count: the 8th number of /proc/stat's "cpu" line, in
# ticks of CLK_TCK, summed over the machine's CPUs (proc(5)); empty where there
# is none. stolen_since TICKS: the seconds stolen since then, "-" without it.
HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)
steal_ticks() { awk '$1 == "cpu" && NF >= 9 { print $9; exit }' /proc/stat 2>/dev/null || true; }
stolen_since() {
  local now
  now=$(steal_ticks)
  if [ -n "$1" ] && [ -n "$now" ]; then
    awk -v a="$1" -v b="$now" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }'
  else
    printf -- '-'
  fi
}
run_steal0=$(steal_ticks) run_t0=$(date +%s)

# gemm_check ROWS IN OUT: `ringpipe bench fma`'s FMA probe and GEMM check on
# that shape for CHECK_SECONDS each: "GEMM_GFLOPS PROBE_GFLOPS", empty without
gemm_check() {
  [ "$CHECK_SECONDS" = 0 ] && return 0
  "$RINGPIPE" bench fma --seconds "$CHECK_SECONDS" --threads "$THREADS" --gemm "$GEMM" \
    --gemm-rows "$1" --gemm-in "$2" --gemm-out "$3" 2>/dev/null | check_figures || true
}
# "GEMM PROBE" -> the table's cell "253 / 347", "-" when empty
check_cell() {
  if [ -n "$1" ]; then printf '%.0f / %.0f' "${1% *}" "${1#* }"; else printf -- '-'; fi
}
# "GEMM PROBE" -> " GEMM" (field 1) or " PROBE" (field 2), to collect; nothing when empty
check_field() {
  [ -n "$2" ] || return 0
  if [ "$1" = 1 ]; then printf ' %s' "${2% *}"; else printf ' %s' "${2#* }"; fi
}
# a side's collected checks -> "GEMM 253 (221..270), probe 347 (177..350) GFLOP/s"
check_spread() {
  printf 'GEMM %s, probe %s GFLOP/s' "$(echo "$1" | median_spread "%.0f (%.0f..%.0f)" n/a)" \
    "$(echo "$2" | median_spread "%.0f (%.0f..%.0f)" n/a)"
}

# space-separated values (empty ones dropped) -> one a line, smallest first
sorted_values() { tr ' ' '\n' | { grep . || true; } | sort -g; }
# values -> "median (min..max)" in printf format FMT (default: ratios "a/b" of
# paired columns, as 1.23x (1.10..1.40)); EMPTY when there is none
median_spread() {
  local fmt=${1:-"%.2fx (%.2f..%.2f)"} empty=${2:-"n/a (no round gave both rates)"}
  sorted_values | awk -v fmt="$fmt" -v empty="$empty" '
    { v[NR] = $1 } END {
      if (NR == 0) { printf "%s", empty; exit }
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf fmt, m, v[1], v[NR] }'; }
spread() { median_spread; }
# fractions -> "0.812 (0.790..0.830)"
fraction_spread() { median_spread "%.3f (%.3f..%.3f)" "n/a (no round printed one)"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print 0 }'; }
# values -> the largest / the smallest ("" when there is none)
list_max() { sorted_values | tail -1; }
list_min() { sorted_values | head -1; }
# "A B UNIT NAME_A NAME_B" -> "1.23x (NAME_A A / NAME_B B UNIT)": the ratio of
# each side's best round, the one noise (which only ever slows a round) touched
# least on that side; n/a without both
best_pair() {
  if [ -n "$1" ] && [ -n "$2" ]; then
    printf '%.2fx (%s %s / %s %s %s)' "$(ratio "$1" "$2")" "$4" "$1" "$5" "$2" "$3"
  else
    printf 'n/a (no round gave both)'
  fi
}

model_flags() {
  case $1 in
    default) echo "--layers 6 --channels 384 --heads 6 --seq 256 --batch 4 --vocab 256" ;;
    gpt2) echo "--layers 12 --channels 768 --heads 12 --seq 512 --batch 4 --vocab 50257" ;;
    *) echo "vs_torch: unknown model '$1' in MODELS; use default or gpt2" >&2; exit 2 ;;
  esac
}
# the model's MLP forward shape (B x T rows, C -> 4C): the GEMM check's
model_check_shape() {
  case $1 in
    default) echo "1024 384 1536" ;;
    gpt2) echo "2048 768 3072" ;;
  esac
}

# ---- the model's GEMMs alone: ringpipe bench gemm (own, OpenBLAS) vs torch.mm
# rate and FMA fraction of one mode's line of `ringpipe bench gemm`
gemm_line() { sed -n "s/^  $1 .* \([0-9.]*\) GFLOP\/s  (\([0-9.]*\) of the FMA peak)/\1 \2/p"; }
# " F": rate $1 as a fraction of the FMA probe that a `bench gemm` line "rate fraction" ($2) used
probe_fraction() {
  awk -v t="$1" -v r="${2%% *}" -v f="${2##* }" 'BEGIN { if (r > 0) printf " %.3f", t * f / r }'
}
gemm_rounds() {
  local model=$1 flags=$2 rs="" r out own blas tm tq
  echo "### GEMMs alone, $model model: every matmul shape of a layer and the LM head, forward and backward (GFLOP/s, fraction of the FMA probe)" | tee -a "$report"
  echo | tee -a "$report"
  # ISA=avx2 holds ringpipe's kernels and MKL, not OpenBLAS (no script sets OPENBLAS_CORETYPE)
  echo "| round | ringpipe own | OpenBLAS (blas mode${ISA:+, its own kernels: not held to $ISA}) | torch.mm | own / torch.mm | torch.mm 2048^3 |" | tee -a "$report"
  echo "|---|---|---|---|---|---|" | tee -a "$report"
  for r in $(seq "$ROUNDS"); do
    # shellcheck disable=SC2086
    out=$("$RINGPIPE" bench gemm $flags --threads "$THREADS" 2>"$OUT/last.err") || true
    own=$(echo "$out" | gemm_line own)
    blas=$(echo "$out" | gemm_line blas)
    [ -n "$blas" ] || echo "vs_torch: ringpipe bench gemm failed: $(tail -1 "$OUT/last.err")" >&2
    # shellcheck disable=SC2086
    tm=$("$TPY" "$PYBENCH" gemm $flags --threads "$THREADS" 2>"$OUT/last.err" |
         sed -n 's/^gemm_gflops: //p') || true
    [ -n "$tm" ] || echo "vs_torch: torch gemm failed: $(tail -1 "$OUT/last.err")" >&2
    tq=$("$TPY" "$PYBENCH" gemm --square 2048 --threads "$THREADS" 2>"$OUT/last.err" |
         sed -n 's/^gemm_gflops: //p') || true
    [ -n "$tq" ] || echo "vs_torch: torch square gemm failed: $(tail -1 "$OUT/last.err")" >&2
    local x="" tf="" qf=""
    if [ -n "$own" ] && [ -n "$tm" ]; then x=$(ratio "${own%% *}" "$tm"); rs="$rs $x"; fi
    # torch.mm's fraction of the same probe (the FMA peak is rate / fraction)
    if [ -n "$blas" ] && [ -n "$tm" ]; then
      tf=$(probe_fraction "$tm" "$blas")
    fi
    if [ -n "$blas" ] && [ -n "$tq" ]; then qf=$(probe_fraction "$tq" "$blas"); fi
    echo "| $r | ${own:-n/a} | ${blas:-failed} | ${tm:-failed}$tf | ${x:-n/a} | ${tq:-failed}$qf |" | tee -a "$report"
  done
  echo | tee -a "$report"
  echo "ringpipe own GEMM / torch.mm, $model: $(echo "$rs" | spread)" | tee -a "$report"
  echo | tee -a "$report"
}

# the median step's tokens/s from a run's "  per step: median M tokens/s, ..."
# line (both sides print it; empty for a run of one step). A round's mean rate
# takes every hiccup of its few steps, the median the step each side ran most:
# PyTorch's compiled steps spread wider on a shared VM (1557-2466 tokens/s in
# one 12-step run of the default model where ringpipe's spread 3371-3725).
step_median() { sed -n 's/^  per step: median \([0-9.]*\) tokens\/s.*/\1/p'; }

# ---- training
for model in $MODELS; do
  flags=$(model_flags "$model")
  declare -A ratios=() med_ratios=() torch_rates=() gchecks=() pchecks=()
  rps=""
  # shellcheck disable=SC2046 # three numbers
  set -- $(model_check_shape "$model")
  echo "## training, $model model ($flags), $PRECISION" | tee -a "$report"
  echo | tee -a "$report"
  # the FMA columns: ringpipe's model FLOP/s at its mean rate over the fp32 FMA
  # probe, as `bench train` prints it (fp32 runs only), and over the same probe
  # run on all the threads at once after the steps (the sum of their medians):
  # lower where one busy core clocks higher than all of them together
  # tok/s cells: the run's mean rate, then the median step's (see step_median)
  echo "| round | ringpipe tok/s (mean / median step) | ringpipe / FMA probe | ringpipe / probe on all threads at once | $(for i in $IMPLS; do printf 'torch %s tok/s (mean / median step) | ' "$i"; done)CPU s stolen: ringpipe$(for i in $IMPLS; do printf ' / torch %s' "$i"; done) | checks before, GEMM / FMA probe GFLOP/s: ringpipe$(for i in $IMPLS; do printf '; torch %s' "$i"; done) |" | tee -a "$report"
  echo "|---|---|---|---|$(for i in $IMPLS; do printf -- '---|'; done)---|---|" | tee -a "$report"
  fmas="" fmas_all=""
  for r in $(seq "$ROUNDS"); do
    ck=$(gemm_check "$@")
    gchecks[ringpipe]="${gchecks[ringpipe]:-}$(check_field 1 "$ck")"
    pchecks[ringpipe]="${pchecks[ringpipe]:-}$(check_field 2 "$ck")"
    cells=$(check_cell "$ck")
    s0=$(steal_ticks)
    # shellcheck disable=SC2086
    # a run that fails shows as "failed" (its last stderr line is printed) and the
    # rounds go on: pipefail must not end the script here
    "$RINGPIPE" bench train $flags --precision "$PRECISION" --steps $((STEPS + 2)) --threads "$THREADS" \
      --gemm "$GEMM" --no-measure-peak >"$OUT/last.out" 2>"$OUT/last.err" || true
    rp=$(sed -n 's/^  tokens\/s: //p' "$OUT/last.out")
    rpm=$(step_median <"$OUT/last.out")
    fma=$(sed -n 's/^  model FLOP\/s over the FMA probe .*): \([0-9.]*\) (mean rate).*/\1/p' "$OUT/last.out")
    fma_all=$(sed -n 's/^  model FLOP\/s over the probe on all threads at once .*): \([0-9.]*\) (mean rate).*/\1/p' "$OUT/last.out")
    fmas="$fmas $fma" fmas_all="$fmas_all $fma_all" rps="$rps $rp"
    [ -n "$rp" ] || echo "vs_torch: ringpipe bench train failed: $(tail -1 "$OUT/last.err")" >&2
    line="| $r | $rp / ${rpm:--} | ${fma:--} | ${fma_all:--} |"
    stolen=$(stolen_since "$s0")
    for impl in $IMPLS; do
      ck=$(gemm_check "$@")
      gchecks[$impl]="${gchecks[$impl]:-}$(check_field 1 "$ck")"
      pchecks[$impl]="${pchecks[$impl]:-}$(check_field 2 "$ck")"
      cells="$cells; $(check_cell "$ck")"
      s0=$(steal_ticks)
      # shellcheck disable=SC2086
      "$TPY" "$PYBENCH" train --impl "$impl" $flags --precision "$PRECISION" --steps "$STEPS" --warmup 3 \
        --threads "$THREADS" >"$OUT/last.out" 2>"$OUT/last.err" || true
      tt=$(sed -n 's/^tokens\/s: //p' "$OUT/last.out")
      ttm=$(step_median <"$OUT/last.out")
      [ -n "$tt" ] || echo "vs_torch: torch $impl failed: $(tail -1 "$OUT/last.err")" >&2
      line="$line ${tt:-failed} / ${ttm:--} |"
      [ -n "$tt" ] && [ -n "$rp" ] && ratios[$impl]="${ratios[$impl]:-} $(ratio "$rp" "$tt")"
      [ -n "$ttm" ] && [ -n "$rpm" ] && med_ratios[$impl]="${med_ratios[$impl]:-} $(ratio "$rpm" "$ttm")"
      [ -n "$tt" ] && torch_rates[$impl]="${torch_rates[$impl]:-} $tt"
      stolen="$stolen / $(stolen_since "$s0")"
    done
    echo "$line $stolen | $cells |" | tee -a "$report"
  done
  echo | tee -a "$report"
  for impl in $IMPLS; do
    echo "ringpipe / torch $impl, $model, $PRECISION: $(echo "${ratios[$impl]:-}" | spread)" | tee -a "$report"
    echo "  median step against median step: $(echo "${med_ratios[$impl]:-}" | spread)" | tee -a "$report"
  done
  for impl in $IMPLS; do
    echo "  best round of each side: $(best_pair "$(echo "$rps" | list_max)" \
      "$(echo "${torch_rates[$impl]:-}" | list_max)" tokens/s ringpipe "torch $impl")" |
      tee -a "$report"
  done
  [ "$PRECISION" = fp32 ] &&
    echo "ringpipe's model FLOP/s over the FMA probe, $model, at each round's mean rate: $(echo "$fmas" | fraction_spread)" | tee -a "$report"
  [ "$PRECISION" = fp32 ] &&
    echo "the same over the probe on all threads at once: $(echo "$fmas_all" | fraction_spread)" | tee -a "$report"
  [ "$CHECK_SECONDS" != 0 ] &&
    echo "checks before each side's runs (the GEMM on $1 x $2 -> $3), median (min..max): ringpipe $(check_spread "${gchecks[ringpipe]:-}" "${pchecks[ringpipe]:-}")$(for i in $IMPLS; do printf '; torch %s %s' "$i" "$(check_spread "${gchecks[$i]:-}" "${pchecks[$i]:-}")"; done)" | tee -a "$report"
  echo | tee -a "$report"
  unset ratios med_ratios torch_rates gchecks pchecks
  [ -n "$GEMMS" ] && [ "$PRECISION" = fp32 ] && gemm_rounds "$model" "$flags"
done

# ---- attention: flash vs SDPA, B1 NH6 HS64
if [ -n "$ATTN_T" ]; then
  echo "## attention forward+backward, B=1 NH=6 HS=64 (ms, best of repetitions over $ATTN_SECONDS s a side, at least 2, $ATTN_CLOCK clock)" | tee -a "$report"
  echo | tee -a "$report"
  echo "| T | causal | round | ringpipe flash | fraction of FMA peak | torch SDPA | SDPA / flash | CPU s stolen: flash / SDPA | checks before, GEMM / FMA probe GFLOP/s: flash; SDPA |" | tee -a "$report"
  echo "|---|---|---|---|---|---|---|---|---|" | tee -a "$report"
  summary="" flash_g="" flash_p="" sdpa_g="" sdpa_p=""
  for T in $ATTN_T; do
    for causal in 1 0; do
      rs="" fls="" sds=""
      cz=$([ $causal = 1 ] && echo yes || echo no)
      for r in $(seq "$ROUNDS"); do
        ck=$(gemm_check 1024 384 1536)
        flash_g="$flash_g$(check_field 1 "$ck")" flash_p="$flash_p$(check_field 2 "$ck")"
        cells=$(check_cell "$ck")
        s0=$(steal_ticks)
        if [ "$ATTN_CLOCK" = cpu ]; then
          row=$("$FLASH_CPU" "$T" "$causal" 3 2>/dev/null |
                sed -n 's/.*f+b \([0-9.]*\) ms.* = \([0-9.]*\) of the FMA peak.*/\1 \2/p') || true
        else
          row=$("$RINGPIPE" bench attention --tmin "$T" --tmax "$T" --causal "$cz" --batch 1 \
                --heads 6 --head-size 64 --naive-max-gib 0 --threads "$THREADS" \
                --min-seconds "$ATTN_SECONDS" 2>/dev/null |
                awk -v T="$T" '$1 == T && $2 ~ /yes|no/ { print $5, $19 }') || true
        fi
        fl=${row%% *}
        fma=${row##* }
        stolen=$(stolen_since "$s0")
        ck=$(gemm_check 1024 384 1536)
        sdpa_g="$sdpa_g$(check_field 1 "$ck")" sdpa_p="$sdpa_p$(check_field 2 "$ck")"
        cells="$cells; $(check_cell "$ck")"
        s0=$(steal_ticks)
        tclock=""
        if [ "$ATTN_CLOCK" = cpu ]; then tclock=--cpu-time; fi
        # shellcheck disable=SC2086
        sd=$("$TPY" "$PYBENCH" attention --seq "$T" --causal "$causal" --batch 1 --heads 6 \
             --head-size 64 --threads "$THREADS" --min-seconds "$ATTN_SECONDS" $tclock 2>/dev/null |
             sed -n 's/^fb_ms: //p') || true
        x=$(ratio "${sd:-0}" "${fl:-0}")
        if [ -n "$sd" ] && [ -n "$fl" ]; then rs="$rs $x"; fi
        fls="$fls $fl" sds="$sds $sd"
        echo "| $T | $cz | $r | ${fl:-failed} | ${fma:-?} | ${sd:-failed} | $x | $stolen / $(stolen_since "$s0") | $cells |" | tee -a "$report"
      done
      summary="$summary
flash vs SDPA, T=$T causal=$cz: $(echo "$rs" | spread)
  best round of each side: $(best_pair "$(echo "$sds" | list_min)" "$(echo "$fls" | list_min)" ms SDPA flash)"
    done
  done
  echo "$summary" | tee -a "$report"
  [ "$CHECK_SECONDS" != 0 ] &&
    echo "checks before each side's runs (the GEMM on 1024 x 384 -> 1536), median (min..max): flash $(check_spread "$flash_g" "$flash_p"); SDPA $(check_spread "$sdpa_g" "$sdpa_p")" | tee -a "$report"
fi
rm -f "$OUT/last.err"
# the whole run's steal, over what the machine's CPUs had in its wall time
ncpu=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
wall=$(($(date +%s) - run_t0))
[ "$wall" -gt 0 ] || wall=1   # a run under a second (the suite's stand-ins) still has a steal count
stolen=$(stolen_since "$run_steal0")
if [ "$stolen" != - ] && [ "$wall" -gt 0 ]; then
  echo "Hypervisor steal over this run: $stolen s of this machine's $ncpu CPUs x $wall s ($(awk -v s="$stolen" -v n="$ncpu" -v w="$wall" 'BEGIN { printf "%.1f", 100 * s / (n * w) }') %; /proc/stat)." | tee -a "$report"
else
  echo "Hypervisor steal over this run: not known (no steal count in /proc/stat)." | tee -a "$report"
fi
echo
echo "vs_torch: report in $report"
