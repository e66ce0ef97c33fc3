#!/bin/sh
# `ringpipe bench fma`: the FMA peak's probe on every thread at once. Its table
# has one row per thread with the runs' rates in order (best >= p90 >= median
# >= p10 > 0), the start-up probe line and the verdict on the sum of the
# medians; then the GEMM check (the shape asked, its repeats' rates in order,
# its median over the probe's sum of medians, which it recomputes), none with
# --no-gemm-check; --isa avx2 runs the ymm loop; bad input (a time out of range, a
# ceiling without a SIMD probe, a GEMM shape out of range or too big) is
# status 2 with the value and the fix.
# usage: bench_fma_cli.sh RINGPIPE WORKDIR
set -eu
ringpipe=$1 work=$2
# shellcheck source=tests/cli_prelude.sh
. "$(dirname "$0")/../cli_prelude.sh"

# check_run FILE THREADS LOOP: the header, THREADS ordered rows and the verdict
check_run() {
  file=$1 threads=$2 loop=$3
  grep -q "^bench fma: the $loop register-only FMA loop, $threads threads* at once" "$file" ||
    bad "$file: no header naming the $loop loop and $threads threads"
  grep -Eq '^  start-up probe \(one thread, best run of 40 ms\): [0-9.]+ GFLOP/s a thread' "$file" ||
    bad "$file: no start-up probe line"
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 6 {
    n++
    if (!($3 >= $4 && $4 >= $5 && $5 >= $6 && $6 > 0 && $2 >= 1)) bad++
  } END { printf "%d %d", n, bad }' "$file")
  [ "$rows" = "$threads 0" ] || bad "$file: want $threads ordered thread rows, got (rows, bad) = $rows"
  grep -Eq '^  all threads at once, the sum of their medians: [0-9.]+ GFLOP/s, [0-9.]+ of the FMA peak$' "$file" ||
    bad "$file: no sum-of-medians line"
}

# check_gemm FILE THREADS SHAPE: the GEMM check's header, one ordered row and
# the ratio line, whose figure is the row's median over the probe's sum
check_gemm() {
  file=$1 threads=$2 shape=$3
  grep -q "^GEMM check: $shape (rows x in -> out features), forward + backward, all $threads threads*, back to back" "$file" ||
    bad "$file: no GEMM check header for $shape on $threads threads"
  grep -q '^  gemm ' "$file" || bad "$file: no line naming the GEMM"
  got=$(awk '
    /^  all threads at once, the sum of their medians:/ { sum = $10 }
    /^GEMM check:/ { in_check = 1 }
    in_check && $1 ~ /^[0-9]+$/ && NF == 5 {
      rows++
      if (!($2 >= $3 && $3 >= $4 && $4 >= $5 && $5 > 0 && $1 >= 1)) bad++
      median = $4
    }
    /^  the GEMM.s median over the probe.s sum of medians: / { ratio = $10 + 0 }
    END {
      want = sum > 0 ? median / sum : -1
      ok = ratio > 0 && ratio - want < 0.0015 && want - ratio < 0.0015
      printf "%d %d %d", rows, bad, ok }' "$file")
  [ "$got" = "1 0 1" ] || bad "$file: GEMM check (rows, unordered, ratio right) = $got, want 1 0 1"
}

if "$ringpipe" bench fma --seconds 0.2 --threads 2 >"$work/out" 2>"$work/err"; then
  cat "$work/out"
  # zmm where the ceiling (the CPU's, or RINGPIPE_ISA's) has AVX-512
  default_loop="ymm (avx2)"
  if [ "${RINGPIPE_ISA:-}" != avx2 ] && grep -qw avx512f /proc/cpuinfo; then
    default_loop="zmm (avx512)"
  fi
  check_run "$work/out" 2 "$default_loop"
  check_gemm "$work/out" 2 "1024 x 384 -> 1536"
  "$ringpipe" bench fma --seconds 0.1 --threads 1 --isa avx2 >"$work/avx2" 2>&1 ||
    bad "bench fma --isa avx2: status $? ($(cat "$work/avx2"))"
  check_run "$work/avx2" 1 "ymm (avx2)"
  check_gemm "$work/avx2" 1 "1024 x 384 -> 1536"
  "$ringpipe" bench fma --seconds 0.1 --threads 1 --gemm-rows 96 --gemm-in 64 --gemm-out 80 \
    --gemm split >"$work/shape" 2>&1 || bad "bench fma with a GEMM shape: status $? ($(cat "$work/shape"))"
  check_gemm "$work/shape" 1 "96 x 64 -> 80"
  grep -q '^  gemm split' "$work/shape" || bad "bench fma --gemm split: the check does not name split"
  "$ringpipe" bench fma --seconds 0.1 --threads 1 --no-gemm-check >"$work/nogemm" 2>&1 ||
    bad "bench fma --no-gemm-check: status $? ($(cat "$work/nogemm"))"
  check_run "$work/nogemm" 1 "$default_loop"
  grep -q 'GEMM' "$work/nogemm" && bad "bench fma --no-gemm-check printed a GEMM check"
  # operands past what a check takes: refused with the size and the fix
  set +e
  "$ringpipe" bench fma --seconds 0.1 --gemm-rows 1048576 --gemm-in 4096 >"$work/big" 2>&1
  status=$?
  set -e
  [ "$status" -eq 2 ] || bad "bench fma with a 1048576 x 4096 GEMM check: status $status, want 2"
  grep -q "GEMM check shape 1048576 x 4096 -> 1536: .* GiB of operands, over the 4 GiB a check takes; make the shape smaller" "$work/big" ||
    bad "bench fma with a huge GEMM check: message '$(cat "$work/big")'"
else
  # no SIMD probe under this ceiling (RINGPIPE_ISA=scalar, or a CPU without AVX2)
  status=$?
  [ "$status" -eq 2 ] || bad "bench fma without a SIMD ceiling: status $status, want 2"
  grep -q "no SIMD FMA probe under the instruction-set ceiling scalar" "$work/err" ||
    bad "bench fma without a SIMD ceiling: message '$(cat "$work/err")'"
  echo "bench_fma_cli: no SIMD probe here ($(cat "$work/err")); checked its error only"
fi

# the scalar ceiling has no probe: status 2 and why
set +e
"$ringpipe" bench fma --seconds 0.1 --isa scalar >"$work/scalar" 2>&1
status=$?
set -e
[ "$status" -eq 2 ] || bad "bench fma --isa scalar: status $status, want 2"
grep -q "no SIMD FMA probe under the instruction-set ceiling scalar" "$work/scalar" ||
  bad "bench fma --isa scalar: message '$(cat "$work/scalar")'"

# a time out of range names the value and the range
set +e
"$ringpipe" bench fma --seconds 0 >"$work/zero" 2>&1
status=$?
set -e
[ "$status" -eq 2 ] || bad "bench fma --seconds 0: status $status, want 2"
grep -q -- "--seconds 0 is out of range; use a number in 0.01..60" "$work/zero" ||
  bad "bench fma --seconds 0: message '$(cat "$work/zero")'"

# a GEMM side out of range names the value and the range
set +e
"$ringpipe" bench fma --gemm-rows 0 >"$work/rows0" 2>&1
status=$?
set -e
[ "$status" -eq 2 ] || bad "bench fma --gemm-rows 0: status $status, want 2"
grep -q -- "--gemm-rows 0 is out of range; use an integer in 1..1048576" "$work/rows0" ||
  bad "bench fma --gemm-rows 0: message '$(cat "$work/rows0")'"

"$ringpipe" bench fma --help >"$work/help" 2>&1 || bad "bench fma --help: status $?"
grep -q -- "--seconds" "$work/help" || bad "bench fma --help: no --seconds"
grep -q -- "--gemm-rows" "$work/help" || bad "bench fma --help: no --gemm-rows"

finish bench_fma_cli
