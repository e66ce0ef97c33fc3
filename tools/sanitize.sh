#!/bin/sh
# Sanitizer runs of the test suite, documented in docs/reliability.md.
#
#   tools/sanitize.sh asan    ASan + UBSan build (build-asan), the whole default suite
#   tools/sanitize.sh tsan    TSan build (build-tsan), the threaded subset (TSAN_TESTS)
#   tools/sanitize.sh         both
#
# Any sanitizer report fails the test that produced it: UBSan halts on the first
# report, ASan/LSan and TSan exit non-zero. Suppressions (tools/lsan.supp,
# tools/tsan.supp) cover Open MPI's own allocations and its lock-order report in
# MPI_Init only. Extra arguments after the mode go to `meson test` (e.g. a test name).
set -u
mode=${1:-all}
[ $# -gt 0 ] && shift
src=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under TSan every test takes 5-15x longer; these exercise every threaded part
# (pool and work stealing, kernels split over the pool, flash attention, the
# loader, ring attention's overlap thread, the pipeline executor, data parallel
# overlap, RL rollouts) at two ranks. The 4-rank layouts repeat the same code with
# more processes than this machine's cores and time out under TSan.
TSAN_TESTS=${TSAN_TESTS:-"base pool_steal kernels_matmul kernels_rowwise kernels_fused flash_ref
  flash_blocks model io_data io_checkpoint schedule cp_attention_np2 bf16_gemm pp2_1f1b pp2_zbh1
  dp2 cp2_ring_zigzag dp2_zero1 recompute_full rl_run rl_dp2 bad_input"}

setup() { # setup DIR SANITIZER
  [ -d "$src/$1" ] || meson setup "$src/$1" "$src" -Db_sanitize="$2" -Db_lundef=false \
    --buildtype=debugoptimized >/dev/null || exit 1
  ninja -C "$src/$1" >/dev/null || { ninja -C "$src/$1" | tail -20; exit 1; }
}

status=0
if [ "$mode" = asan ] || [ "$mode" = all ]; then
  setup build-asan address,undefined
  ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1 \
  LSAN_OPTIONS=suppressions="$src/tools/lsan.supp":print_suppressions=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C "$src/build-asan" --print-errorlogs --timeout-multiplier 4 "$@" || status=1
fi
if [ "$mode" = tsan ] || [ "$mode" = all ]; then
  setup build-tsan thread
  [ $# -gt 0 ] || set -- $TSAN_TESTS
  TSAN_OPTIONS=suppressions="$src/tools/tsan.supp":second_deadlock_stack=1:history_size=4 \
    meson test -C "$src/build-tsan" --print-errorlogs --timeout-multiplier 8 "$@" || status=1
fi
exit $status
