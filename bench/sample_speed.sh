#!/usr/bin/env bash
# `ringpipe sample` tokens/s through the KV cache against the full-recompute
# reference (--kv-cache=0), on the default model shape trained for a few steps
# at --seq T for each T, filling the context (T - 8 new tokens). Both modes run
# in the same round, alternating, ROUNDS times; the table gives the median of
# each and their ratio, and whether the texts were identical.
# Writes a markdown table to stdout and to OUT_DIR/sample_speed.md.
#
# usage: bench/sample_speed.sh [OUT_DIR]        (default bench/results)
#
# Environment knobs (defaults in brackets):
#   RINGPIPE  the ringpipe binary [build/ringpipe]
#   SEQS      context lengths ["256 1024"]
#   MODEL     model flags ["--layers 6 --channels 384 --heads 6"]
#   THREADS   compute threads [2]
#   ROUNDS    alternating rounds [3]
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
SEQS=${SEQS:-256 1024}
MODEL=${MODEL:---layers 6 --channels 384 --heads 6}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rate_of() { sed -n 's/.*: \([0-9.]*\) tokens\/s.*/\1/p' "$1"; }

table="| T | new tokens | recompute tok/s | KV cache tok/s | speed-up | same text |
| --- | --- | --- | --- | --- | --- |"
for T in $SEQS; do
  echo "sample_speed.sh: training a checkpoint at --seq $T" >&2
  "$RINGPIPE" train $MODEL --seq "$T" --batch 1 --steps 5 --eval-every 0 --sample-tokens 0 \
    --measure-peak=0 --quiet --out "$work/run$T" >/dev/null 2>&1
  n=$((T - 8))
  : >"$work/r0" && : >"$work/r1"
  same=yes
  for round in $(seq "$ROUNDS"); do
    for kv in 0 1; do
      "$RINGPIPE" sample --checkpoint "$work/run$T/ckpt" --prompt "ROMEO:" --tokens "$n" \
        --threads "$THREADS" --kv-cache=$kv >"$work/text$kv" 2>"$work/err$kv"
      rate_of "$work/err$kv" >>"$work/r$kv"
      echo "sample_speed.sh: T=$T round $round kv-cache=$kv: $(tail -1 "$work/err$kv")" >&2
    done
    cmp -s "$work/text0" "$work/text1" || same=no
  done
  a=$(median <"$work/r0") b=$(median <"$work/r1")
  table="$table
| $T | $n | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1fx", b / a }') | $same |"
done
{
  echo "# ringpipe sample: KV cache vs full recompute"
  echo
  echo "model: $MODEL, $THREADS threads, median of $ROUNDS alternating rounds, $(date -u +%F)"
  echo
  echo "$table"
} | tee "$OUT/sample_speed.md"
