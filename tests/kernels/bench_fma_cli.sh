#!/bin/sh
# `ringpipe bench fma`: the FMA peak's probe on every thread at once. Its table
# has one row per thread with the runs' rates in order (best >= p90 >= median
# >= p10 > 0), the start-up probe line and the verdict on the sum of the
# medians; --isa avx2 runs the ymm loop; bad input (a time out of range, a
# ceiling without a SIMD probe) is status 2 with the value and the fix.
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

if "$ringpipe" bench fma --seconds 0.2 --threads 2 >"$work/out" 2>"$work/err"; then
  cat "$work/out"
  # zmm where the ceiling (the CPU's, or RINGPIPE_ISA's) has AVX-512
  default_loop="ymm (avx2)"
  if [ "${RINGPIPE_ISA:-}" != avx2 ] && grep -qw avx512f /proc/cpuinfo; then
    default_loop="zmm (avx512)"
  fi
  check_run "$work/out" 2 "$default_loop"
  "$ringpipe" bench fma --seconds 0.1 --threads 1 --isa avx2 >"$work/avx2" 2>&1 ||
    bad "bench fma --isa avx2: status $? ($(cat "$work/avx2"))"
  check_run "$work/avx2" 1 "ymm (avx2)"
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

"$ringpipe" bench fma --help >"$work/help" 2>&1 || bad "bench fma --help: status $?"
grep -q -- "--seconds" "$work/help" || bad "bench fma --help: no --seconds"

finish bench_fma_cli
