#!/bin/sh
# Data-parallel post-training reproduces the single-rank job: SFT, GRPO and PPO
# with 1 rank and under mpirun -n 2 (rollouts split unevenly: 5 prompts), their
# metrics compared. Rollouts depend only on (seed, problem, completion) so the
# rewards match exactly; losses and norms differ only by summation order. Every
# evaluation also checks that the ranks' parameters are bitwise identical.
# RL_LAYOUT (environment) adds flags to the 2-rank runs only, e.g. "--zero 1":
# the sharded AdamW state and the bucketed reductions of the training engine
# must train the same model.
# usage: run_dp.sh RL_CLI RL_COMPARE OUTDIR MPIRUN [MPIRUN_ARGS...]
set -e
cli=$1; cmp=$2; out=$3; shift 3
layout=${RL_LAYOUT:-}
rm -rf "$out"
mkdir -p "$out"
common="--layers 1 --channels 32 --heads 2 --seq 16 --task add --task-size 2 --eval-n 24 --threads 1 --no-pin --quiet"
sft="--steps 30 --batch 32 --micro 8 --lr 3e-3 --eval-every 15"
"$cli" sft $common $sft --out "$out/sft1"
"$@" -n 2 "$cli" sft $common $sft $layout --out "$out/sft2"
"$cmp" "$out/sft1/metrics.jsonl" "$out/sft2/metrics.jsonl" loss:1e-5 answer_tokens:0 heldout_acc:0
grpo="--init-from $out/sft1/ckpt --steps 4 --prompts 5 --group 4 --mu 2 --beta 0.05 --micro 8 --eval-every 2 --lr 1e-3"
"$cli" grpo $common $grpo --out "$out/grpo1"
"$@" -n 2 "$cli" grpo $common $grpo $layout --out "$out/grpo2"
"$cmp" "$out/grpo1/metrics.jsonl" "$out/grpo2/metrics.jsonl" reward_mean:0 zero_std_frac:0 \
  resp_len:0 loss:1e-4 grad_norm:1e-4 kl_ref:1e-3 clip_frac:0 heldout_acc:0
ppo="--init-from $out/sft1/ckpt --steps 3 --prompts 5 --group 2 --mu 2 --micro 4 --eval-every 3 --lr 1e-3"
"$cli" ppo $common $ppo --out "$out/ppo1"
"$@" -n 2 "$cli" ppo $common $ppo $layout --out "$out/ppo2"
"$cmp" "$out/ppo1/metrics.jsonl" "$out/ppo2/metrics.jsonl" reward_mean:0 resp_len:0 \
  pg_loss:1e-4 value_loss:1e-4 grad_norm:1e-4 kl_ref:1e-3 heldout_acc:0
