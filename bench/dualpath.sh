#!/usr/bin/env bash
# DualPath experiments (issue 13): the serving simulator at paper scale (the
# ablation ladder at 1P2D, the P/D, agent and append sweeps with each
# resource's throughput bound, all three Table 2 data sets, the online
# arrival rate within a TTFT SLO) and the real
# engine small (2 PE + 2 DE ranks in 2 nodes, storage-rate limited so that
# loading dominates): JCT, TTFT, TPOT, storage-NIC balance for the ladder.
# Figures are SVGs ringpipe writes; tools/dualpath_table.py makes the tables.
#
# usage: bench/dualpath.sh [OUT_DIR]            (default bench/results)
# Environment knobs [defaults]:
#   RINGPIPE   the binary [build/ringpipe]
#   AGENTS     simulated agents [1024]
#   REAL       1: run the real engine too [1]
#   REAL_AGENTS, REAL_REPEATS  real runs: agents [8], repeats [3]
#   STORAGE_GBPS  real runs: storage NIC per node [0.5]
#   MPIRUN     launcher [mpirun]
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
OUT=$OUT/dualpath
mkdir -p "$OUT"
AGENTS=${AGENTS:-1024}
REAL=${REAL:-1}
REAL_AGENTS=${REAL_AGENTS:-8}
REAL_REPEATS=${REAL_REPEATS:-3}
STORAGE_GBPS=${STORAGE_GBPS:-0.5}
MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

sim() {
  name=$1; shift
  { echo "\$ ringpipe sim-serve $*"; "$RINGPIPE" sim-serve "$@"; } | tee "$OUT/$name.txt"
}
for ds in 32k 48k 64k; do
  sim "sim-ladder-$ds" --dataset "$ds" --agents "$AGENTS" --p-nodes 1 --d-nodes 2 --svg "$OUT/sim-$ds"
done
sim sim-sweep-pd --agents "$AGENTS" --sweep pd
sim sim-sweep-agents --agents "$AGENTS" --p-nodes 1 --d-nodes 2 --sweep agents
sim sim-sweep-append --agents "$AGENTS" --p-nodes 1 --d-nodes 2 --sweep append
for slo in 2 5; do
  sim "sim-online-slo$slo" --agents "$AGENTS" --p-nodes 1 --d-nodes 2 --sweep online --slo-ttft "$slo"
done

if [ "$REAL" = 1 ]; then
  for r in $(seq 1 "$REAL_REPEATS"); do
    name=real-ladder-r$r
    args="--mode ablation --pe 2 --de 2 --node-size 2 --agents $REAL_AGENTS --max-turns 0 --storage-gbps $STORAGE_GBPS"
    { echo "\$ mpirun -n 5 ringpipe serve $args"
      timeout 900 "$MPIRUN" --oversubscribe --bind-to none -n 5 "$RINGPIPE" serve $args \
        --jsonl "$OUT/real-r$r" --timeline "$OUT/real-r$r"; } | tee "$OUT/$name.txt"
  done
fi
python3 tools/dualpath_table.py "$OUT" | tee "$OUT/tables.md"
