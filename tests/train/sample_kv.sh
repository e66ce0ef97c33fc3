#!/bin/sh
# `ringpipe sample` through the KV cache prints the text of the full-recompute
# reference (--kv-cache=0) for the same seed, greedy and top-k, within the
# model's positions; and says how fast each was.
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
"$ringpipe" train --layers 2 --channels 64 --heads 4 --seq 128 --batch 4 --steps 20 --lr 1e-3 \
  --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet --out "$work" >/dev/null
fails=0
for mode in "--temperature 0" "--temperature 0.8 --top-k 40" "--temperature 1 --top-p 0.9"; do
  for kv in 0 1; do
    "$ringpipe" sample --checkpoint "$work/ckpt" --prompt "ROMEO:" --tokens 120 --threads 1 \
      --seed 7 $mode --kv-cache=$kv >"$work/out$kv.txt" 2>"$work/err$kv.txt"
    tail -1 "$work/err$kv.txt"
  done
  if cmp -s "$work/out0.txt" "$work/out1.txt"; then
    echo "ok: same text with $mode"
  else
    echo "FAIL: the KV cache and the recompute path differ with $mode"
    diff "$work/out0.txt" "$work/out1.txt" | head -5
    fails=$((fails + 1))
  fi
done
[ "$fails" = 0 ]
