#!/bin/sh
# A GPT-2 124M-shaped run (12 layers, 768 wide, 12 heads, 50257-token vocabulary)
# fits the memory it accounts for: the process's peak RSS (the kernel's count,
# start-up GEMM-peak measurement and checkpoint save included) is within 1.5x
# of the "total peak" ringpipe prints. The start-up measurement once allocated
# ~19 GiB for this shape while training needed 2-3.5 GiB.
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
out=$("$ringpipe" train --layers 12 --channels 768 --heads 12 --vocab 50257 --seq 64 --batch 2 \
      --steps 1 --eval-every 0 --sample-tokens 0 --threads 2 --out "$work" 2>&1)
line=$(printf '%s\n' "$out" | grep '^peak memory')
echo "$line"
total=$(printf '%s\n' "$line" | sed -n 's/.*total peak \([0-9.]*\) MiB.*/\1/p')
rss=$(printf '%s\n' "$line" | sed -n 's/.*process peak RSS \([0-9.]*\) MiB.*/\1/p')
[ -n "$total" ] && [ -n "$rss" ] || { echo "FAIL: no memory report in:"; printf '%s\n' "$out" | tail -5; exit 1; }
awk -v t="$total" -v r="$rss" 'BEGIN {
  printf "peak RSS %.1f MiB / accounted total %.1f MiB = %.3f (bound 1.5)\n", r, t, r / t
  exit !(t > 1000 && r <= 1.5 * t) }'
