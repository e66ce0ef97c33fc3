#!/bin/sh
# bf16 mixed precision trains like fp32, checked so that the answer does not
# depend on chaos (which CPU, ISA or OpenBLAS kernel ran the fp32 parts):
#
# - a stable learning rate: at 1e-3 this tiny model's loss falls steadily and a
#   small perturbation of the weights dies out again; at 3e-3 it sits at the
#   edge of stability, where a difference in one rounding grows until the two
#   runs are different trajectories (6% apart after 70 steps on an AVX2 CPU);
# - the first 20 steps, before the runs can have separated, agree step by step
#   within 2^-8 relative: bf16 rounds every matmul operand by at most 2^-8
#   relative, and the loss, a smooth function of the logits, moves by less;
# - both learn: the mean loss of the last 10 of 100 steps is below 70% of the
#   first step's (5.55 = ln 256 at the start, ~3.2 after 100 steps);
# - and end in the same place: those last-10 means within 2% of each other.
# Both with --bf16-attention auto (bf16 flash products only where vdpbf16ps
# measures fast enough) and on (wherever AVX512-BF16 runs), so the bf16
# attention path is trained on every CPU that has it.
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
common="--layers 2 --channels 64 --heads 4 --seq 64 --batch 4 --steps 100 --lr 1e-3 --warmup 10
        --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
"$ringpipe" train $common --out "$work/fp32"
losses() { grep '"loss"' "$1/metrics.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/'; }
losses "$work/fp32" >"$work/fp32.txt"
status=0
for attn in auto on; do
  echo "--precision bf16 --bf16-attention $attn:"
  "$ringpipe" train $common --out "$work/bf16$attn" --data "$work/fp32/data" --precision bf16 \
    --bf16-attention $attn
  losses "$work/bf16$attn" >"$work/bf16$attn.txt"
  paste "$work/fp32.txt" "$work/bf16$attn.txt" | awk '
  function abs(x) { return x < 0 ? -x : x }
  { a[NR] = $1; b[NR] = $2 }
  END {
    if (NR != 100) { print "FAIL: " NR " losses, want 100"; exit 1 }
    bad = 0; early = 0
    for (i = 1; i <= 20; i++) {
      d = abs(b[i] - a[i]) / a[i]
      if (d > early) { early = d; at = i }
    }
    printf "first 20 steps: worst relative difference %.2e at step %d (bound 2^-8 = %.2e)\n",
           early, at, 2 ^ -8
    if (early > 2 ^ -8) bad = 1
    # bf16 must actually run: rounding to 8 bits moves the losses off the fp32 ones
    if (early == 0) { print "FAIL: bf16 losses equal fp32 bitwise: bf16 did not run"; bad = 1 }
    for (i = 91; i <= 100; i++) { ta += a[i]; tb += b[i] }
    ta /= 10; tb /= 10
    printf "mean loss of the last 10 steps: fp32 %.4f, bf16 %.4f (first step %.4f; bound 70%% of it: %.4f)\n",
           ta, tb, a[1], 0.7 * a[1]
    if (ta > 0.7 * a[1] || tb > 0.7 * b[1]) { print "FAIL: a run did not learn"; bad = 1 }
    d = abs(tb - ta) / ta
    printf "relative difference of the last-10 means %.4f (bound 0.02)\n", d
    if (d > 0.02) bad = 1
    exit bad
  }' || status=1
done
exit $status
