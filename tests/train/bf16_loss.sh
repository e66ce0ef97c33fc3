#!/bin/sh
# bf16 mixed precision trains like fp32: after 100 steps on a tiny model the mean
# loss of the last 10 steps is within 2% of the fp32 run's.
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
common="--layers 2 --channels 64 --heads 4 --seq 64 --batch 4 --steps 100 --lr 3e-3 --warmup 10
        --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
"$ringpipe" train $common --out "$work/fp32"
"$ringpipe" train $common --out "$work/bf16" --data "$work/fp32/data" --precision bf16
tail_mean() { grep '"loss"' "$1/metrics.jsonl" | tail -10 |
  sed 's/.*"loss":\([0-9.e+-]*\).*/\1/' | awk '{ s += $1 } END { printf "%.6f", s / NR }'; }
a=$(tail_mean "$work/fp32") b=$(tail_mean "$work/bf16")
echo "mean loss of the last 10 steps: fp32 $a, bf16 $b"
awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d;
  printf "relative difference %.4f (bound 0.02)\n", d; exit !(d <= 0.02) }'
