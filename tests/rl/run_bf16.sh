#!/bin/sh
# RL on the training engine's bf16 matmuls (--precision bf16): SFT trains with
# losses within a bf16 bound of the fp32 job over a few steps (short, so that
# rounding has no time to grow into a different trajectory), and not bitwise
# equal to it (bf16 really ran); GRPO runs its rollouts (fp32 decoding) and
# bf16 updates to the end.
# usage: run_bf16.sh RL_CLI RL_COMPARE OUTDIR
set -e
cli=$1; cmp=$2; out=$3
rm -rf "$out"
mkdir -p "$out"
common="--layers 1 --channels 32 --heads 2 --seq 16 --task add --task-size 2 --eval-n 24 --threads 1 --no-pin --quiet"
sft="--steps 8 --batch 16 --micro 8 --lr 3e-3 --eval-every 4"
"$cli" sft $common $sft --out "$out/fp32"
"$cli" sft $common $sft --precision bf16 --out "$out/bf16"
"$cmp" "$out/fp32/metrics.jsonl" "$out/bf16/metrics.jsonl" loss:3e-2 answer_tokens:0
if cmp -s "$out/fp32/metrics.jsonl" "$out/bf16/metrics.jsonl"; then
  echo "FAIL: the bf16 job's metrics equal the fp32 job's bitwise: bf16 did not run" >&2
  exit 1
fi
grep -q '"loss"' "$out/bf16/metrics.jsonl"
"$cli" grpo $common --init-from "$out/bf16/ckpt" --steps 2 --prompts 4 --group 4 --micro 8 \
  --precision bf16 --out "$out/grpo"
test "$(grep -c '"reward_mean"' "$out/grpo/metrics.jsonl")" -eq 2
echo "bf16 RL: SFT within 3e-2 of fp32 and not identical; GRPO ran 2 steps"
