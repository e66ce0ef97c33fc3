#!/bin/sh
# Post-training demonstration: SFT a small GPT on 3-digit addition ("123+456="
# -> "579\n", byte tokens) to a held-out exact-match accuracy well below 100%,
# then GRPO from that checkpoint on 2 cores (4000 steps of 64 problems x 8
# samples: 8 minutes on an idle 2-core machine, 20 or more on a shared one),
# PPO from the same checkpoint, and GRPO with each of the three loss
# aggregations; tools/plot_rl.py plots reward and held-out accuracy against
# steps and prints the start / final / best accuracy of every run.
#
# usage: tools/rl_demo.sh [OUT]                      (default OUT: runs/rl_demo)
# env:   RINGPIPE     a binary with the sft/grpo/ppo commands (default: the
#                     first of build*/ringpipe that has them, else
#                     build*/tests/rl/ringpipe-rl, the stand-alone driver)
#        PARTS        which parts to run, default "sft grpo agg ppo plot"
#        SFT_STEPS    default 1500     GRPO_STEPS  default 4000 (the long run)
#        CMP_STEPS    default 500 (aggregation comparison and PPO runs)
#        LAUNCH       how to start each job: default "mpirun -n 2 --bind-to none"
#                     (two single-threaded data-parallel ranks on the 2 cores:
#                     rollouts and gradients split between them) when mpirun
#                     exists; LAUNCH= (empty) runs one process with THREADS threads
#        THREADS      threads per process: default 1 with mpirun, else 2
# Everything a run prints goes to OUT/<run>.log; metrics to OUT/<run>/metrics.jsonl.
set -eu

OUT=${1:-runs/rl_demo}
PARTS=${PARTS:-"sft grpo agg ppo plot"}
SFT_STEPS=${SFT_STEPS:-1500}
GRPO_STEPS=${GRPO_STEPS:-4000}
CMP_STEPS=${CMP_STEPS:-500}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

# OPENBLAS_CORETYPE is left as the environment has it: forcing a core type
# the CPU lacks (SKYLAKEX on an AVX2 machine) kills OpenBLAS with an illegal
# instruction. ringpipe prints a note at start-up when OpenBLAS fell back to
# its generic kernels.

has_rl() { [ -x "$1" ] && "$1" sft --help >/dev/null 2>&1; }
BIN=${RINGPIPE:-}
if [ -z "$BIN" ]; then
  for cand in "$ROOT"/build/ringpipe "$ROOT"/build*/ringpipe \
              "$ROOT"/build/tests/rl/ringpipe-rl "$ROOT"/build*/tests/rl/ringpipe-rl; do
    if has_rl "$cand"; then BIN=$cand; break; fi
  done
fi
if [ -z "$BIN" ] || ! has_rl "$BIN"; then
  echo "rl_demo: no ringpipe binary with the sft/grpo/ppo commands; build first" \
       "(meson setup build && ninja -C build) or set RINGPIPE" >&2
  exit 2
fi
if [ -z "${LAUNCH+set}" ]; then
  if command -v mpirun >/dev/null 2>&1; then LAUNCH="mpirun -n 2 --bind-to none"; else LAUNCH=""; fi
fi
if [ -n "$LAUNCH" ]; then
  THREADS=${THREADS:-1}
  if [ "$(id -u)" = 0 ]; then  # Open MPI refuses root unless told
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
else
  THREADS=${THREADS:-2}
fi
mkdir -p "$OUT"
echo "rl_demo: binary $BIN, launch '${LAUNCH:-one process}', $THREADS thread(s) each, output $OUT"

# The model and task: 2 layers, 128 channels, 4 heads, 32 positions; held-out
# accuracy on 500 problems no SFT or RL step ever trains on.
TASK="--task add --task-size 3 --eval-n 500 --threads $THREADS"

run() { # name, command...: run, log, and say how long it took
  name=$1; shift
  echo "rl_demo: $name: $LAUNCH $*"
  start=$(date +%s)
  $LAUNCH "$@" > "$OUT/$name.log" 2>&1 || { tail -5 "$OUT/$name.log"; exit 1; }
  grep -E "done|error" "$OUT/$name.log" | tail -1
  echo "rl_demo: $name took $(( $(date +%s) - start )) s"
}

want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# 1. SFT from scratch: loss on answer tokens only, constant learning rate,
#    stopped early on purpose (about 40% held-out) so that RL starts well below
#    100%. Where SFT stops matters: a model annealed to a low learning rate on
#    its plateau (the carry into the tens digit half learned) barely moves under
#    either more SFT or RL for hundreds of steps; one stopped mid-way at a
#    constant rate is where both make progress.
if want sft; then
  run sft "$BIN" sft $TASK --layers 2 --channels 128 --heads 4 --seq 32 \
    --steps "$SFT_STEPS" --batch 64 --lr 1e-3 --lr-schedule constant --warmup 100 \
    --eval-every 250 --log-every 50 --out "$OUT/sft"
fi
INIT="--init-from $OUT/sft/ckpt"

# 2. GRPO, the 20-minute run: 64 problems x 8 samples per step at temperature 1,
#    one pass per rollout batch (on-policy), clip-higher, no KL (beta 0), loss
#    seq-mean-token-mean, learning rate 1e-4 after a 10-step warmup (in our
#    runs 3e-4 and above drifted towards well-formed wrong answers).
GRPO="$TASK $INIT --prompts 64 --group 8 --lr 1e-4 --warmup 10 --clip-high 0.28 \
  --eval-every 50 --log-every 10"
if want grpo; then
  run grpo "$BIN" grpo $GRPO --steps "$GRPO_STEPS" --loss-agg seq-mean-token-mean \
    --out "$OUT/grpo"
fi

# 3. The three loss aggregations side by side, same budget each. Runs are
#    deterministic, so the long run's first CMP_STEPS steps are the
#    seq-mean-token-mean one (the plot shows them); it runs on its own only
#    when the long run is absent.
if want agg; then
  aggs="token-mean seq-mean-token-sum-norm"
  [ -f "$OUT/grpo/metrics.jsonl" ] || aggs="seq-mean-token-mean $aggs"
  for agg in $aggs; do
    run "grpo_$agg" "$BIN" grpo $GRPO --steps "$CMP_STEPS" --loss-agg "$agg" \
      --out "$OUT/grpo_$agg"
  done
fi

# 4. PPO from the same checkpoint with the same samples per step (value head,
#    GAE, clipped value loss, per-token KL penalty in the reward).
if want ppo; then
  run ppo "$BIN" ppo $TASK $INIT --prompts 64 --group 8 --lr 1e-4 --warmup 10 \
    --clip-high 0.28 --kl-coef 0.02 --eval-every 50 --log-every 10 --steps "$CMP_STEPS" \
    --out "$OUT/ppo"
fi

# 5. Plots (matplotlib, installed with pip if missing).
if want plot; then
  if ! python3 -c "import matplotlib" 2>/dev/null; then
    python3 -m pip install --quiet matplotlib || echo "rl_demo: pip install matplotlib failed;" \
      "try: apt-get install python3-matplotlib" >&2
  fi
  python3 "$ROOT/tools/plot_rl.py" "$OUT" | tee "$OUT/summary.txt"
fi
