#!/usr/bin/env bash
# Tensor parallelism (issue 11): per-rank activation memory, exposed TP
# communication with and without overlap, and throughput relative to tp 1.
#
# - memory: tp 1 / 2 / 4, with and without --sp, at T = 1024 and 4096; the
#   arena's measured peak of activation memory on rank 0 after one step against
#   L x ringpipe's per-layer form from the start-up table (the rest of the
#   activation buffer -- embedding input, ln_f, logits, tokens -- is the
#   difference), and the ratio of each peak to tp 1's;
# - exposed communication: tp 2 + sp, --tp-overlap on and off, on the shared
#   memory transport and on --mca btl tcp,self: the trainer's "ms exposed" of the
#   last step, median over REPEATS runs;
# - throughput: tokens/s of the last step (median over REPEATS) relative to tp 1
#   at the same global batch, real compute (emulated compute is a pipeline
#   feature: --emulate-compute needs --pp > 1).
# Writes markdown to stdout and OUT_DIR/tp.md.
#
# usage: bench/tp.sh [OUT_DIR]        (default bench/results)
# Environment: RINGPIPE [build/ringpipe], MODEL ["--layers 4 --channels 256
#   --heads 8 --batch 1"], REPEATS [3], STEPS [4], MPIRUN [mpirun]
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
MODEL=${MODEL:---layers 4 --channels 256 --heads 8 --batch 1}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-4}
MPIRUN=${MPIRUN:-mpirun}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags="$MODEL --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --warmup 1"
"$RINGPIPE" train $flags --seq 1024 --steps 0 --out "$work/prep" >/dev/null
L=$(printf '%s\n' "$MODEL" | sed -n 's/.*--layers \([0-9]*\).*/\1/p')
# run NP LOG [MPI FLAGS] -- TRAIN FLAGS: one training run, its output in LOG
run() {
  np=$1 log=$2 mpi=()
  shift 2
  while [ "$1" != "--" ]; do mpi+=("$1"); shift; done
  shift
  if [ "$np" = 1 ]; then
    "$RINGPIPE" train "$@" $flags --data "$work/prep/data" --out "$work/run" >"$log" 2>&1
  else
    "$MPIRUN" -n "$np" --oversubscribe --bind-to none "${mpi[@]}" "$RINGPIPE" train "$@" \
      $flags --data "$work/prep/data" --out "$work/run" >"$log" 2>&1
  fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "n/a" }'; }
last_tps() { grep '"tokens_per_s"' "$work/run/metrics.jsonl" | tail -1 |
               sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/'; }
{
  echo "## Activation memory per rank (rank 0, one step, model: $MODEL)"
  echo
  echo "| T | tp | sp | peak activations MiB | L x per-layer form MiB | peak / form | peak / tp 1 |"
  echo "|---|---|---|---|---|---|---|"
  for T in 1024 4096; do
    base=""
    for tp in 1 2 4; do
      for sp in 0 1; do
        [ "$tp" = 1 ] && [ "$sp" = 1 ] && continue
        extra=()
        [ "$tp" -gt 1 ] && extra+=(--tp "$tp")
        [ "$sp" = 1 ] && extra+=(--sp)
        run "$tp" "$work/m.log" -- --seq "$T" --steps 1 "${extra[@]}"
        peak=$(sed -n 's/.*peak memory (rank 0):.* activations \([0-9.]*\) MiB.*/\1/p' "$work/m.log")
        layer=$(sed -n 's/.*activations per layer per micro-batch: \([0-9.]*\) MiB measured.*/\1/p' "$work/m.log")
        [ -z "$base" ] && base=$peak
        awk -v T="$T" -v tp="$tp" -v sp="$sp" -v p="$peak" -v l="$layer" -v L="$L" -v b="$base" \
          'BEGIN { f = l * L; printf "| %s | %s | %s | %.2f | %.2f | %.3f | %.3f |\n", T, tp,
                   sp ? "on" : "off", p, f, p / f, p / b }'
      done
    done
  done
  echo
  echo "## Exposed TP communication, tp 2 + sp, T 1024 (last step, median of $REPEATS)"
  echo
  echo "| transport | overlap | exposed ms | tokens/s |"
  echo "|---|---|---|---|"
  for btl in shm tcp; do
    mpi=()
    [ "$btl" = tcp ] && mpi=(--mca btl tcp,self)
    for ov in --tp-overlap --no-tp-overlap; do
      : >"$work/exp"
      : >"$work/tps"
      for _ in $(seq "$REPEATS"); do
        run 2 "$work/e.log" "${mpi[@]}" -- --seq 1024 --steps "$STEPS" --tp 2 --sp "$ov"
        sed -n 's/.*MiB), \([0-9.]*\) ms exposed.*/\1/p' "$work/e.log" >>"$work/exp"
        last_tps >>"$work/tps"
      done
      echo "| $btl | ${ov#--} | $(median <"$work/exp") | $(median <"$work/tps") |"
    done
  done
  echo
  echo "## Throughput relative to tp 1, T 1024 (real compute, last step, median of $REPEATS)"
  echo
  echo "| layout | tokens/s | relative |"
  echo "|---|---|---|"
  base=""
  for l in "1" "2 --tp 2" "2 --tp 2 --sp" "4 --tp 4 --sp"; do
    set -- $l
    np=$1
    shift
    : >"$work/tps"
    for _ in $(seq "$REPEATS"); do
      run "$np" "$work/t.log" -- --seq 1024 --steps "$STEPS" "$@"
      last_tps >>"$work/tps"
    done
    v=$(median <"$work/tps")
    [ -z "$base" ] && base=$v
    awk -v n="$np ranks $*" -v v="$v" -v b="$base" 'BEGIN { printf "| %s | %.0f | %.2f |\n", n, v, v / b }'
  done
} | tee "$OUT/tp.md"
