#!/usr/bin/env bash
# Context parallelism on packed rows (issue 12): bench_cp_packed on the seeded
# multimodal-like mix at P = 2, 4, 8 ranks (oversubscribed where the cores are
# fewer: the work balance and bytes are counts, the times are only comparable
# within one P), plus the picture of the three layouts. Writes markdown to
# stdout and OUT_DIR/cp_packed.md, and OUT_DIR/cp_packed_layouts.svg.
#
# usage: bench/cp_packed.sh [OUT_DIR]              (default bench/results)
# Environment: SEQ [8192], PS ["2 4 8"], ITERS [2], SEED [1], DATA (a prepared
# directory: its documents instead of the mix), BENCH [build/bench/bench_cp_packed]
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
BENCH=${BENCH:-$PWD/build/bench/bench_cp_packed}
SEQ=${SEQ:-8192} PS=${PS:-"2 4 8"} ITERS=${ITERS:-2} SEED=${SEED:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
extra=()
[ -n "${DATA:-}" ] && extra=(--data "$DATA")
{
  echo "# bench/cp_packed.sh: SEQ=$SEQ PS=\"$PS\" ITERS=$ITERS SEED=$SEED ${DATA:+DATA=$DATA}"
  echo "# $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
  first=1
  for P in $PS; do
    args=(--seq "$SEQ" --iters "$ITERS" --seed "$SEED" "${extra[@]}")
    [ "$first" = 1 ] && args+=(--svg "$OUT/cp_packed_layouts.svg")
    out=$(timeout 1200 mpirun --oversubscribe --bind-to none -n "$P" "$BENCH" "${args[@]}")
    if [ "$first" = 1 ]; then
      printf '%s\n' "$out"      # tables 1 and 3 (rank 0, counted / one rank) once
    else
      printf '%s\n' "$out" | sed -n '/^Table 2/,$p'
    fi
    first=0
  done
} | tee "$OUT/cp_packed.md"
