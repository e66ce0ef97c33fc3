#!/bin/sh
# Pipeline buffer memory per rank (issue 14, ZB-H1 memory): for 1F1B and the
# split-backward schedules at pp 2 and 4, one training step of a C 384, T 256
# model (4 layers at pp 2, 8 at pp 4: the V needs 2p stages), m = 8, and the
# report's per-rank "arena" line: the per-class slot pools (the layout the
# executor had before the arena, each class as many slots as its own peak) and
# the arena it allocates now, in MiB. Memory only: the timings of these runs
# mean nothing (2 threads of work on whatever cores there are).
# usage: bench/pipeline_memory.sh [RINGPIPE]    (default build/ringpipe)
set -u
rp=${1:-build/ringpipe}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| schedule | pp | slot pools, MiB (rank 0 .. p-1) | arena, MiB | largest rank |"
echo "|---|---|---|---|---|"
for cfg in "2 4 1 1f1b" "2 4 1 zb-h1" "2 4 1 zb-h2" "2 4 2 zb-v" "2 4 2 dualpipev" \
           "4 8 1 1f1b" "4 8 1 zb-h1" "4 8 1 zb-h2" "4 8 2 zb-v" "4 8 2 dualpipev"; do
  set -- $cfg
  pp=$1 layers=$2 v=$3 sch=$4
  rm -rf "$out/run"
  timeout 600 mpirun -n "$pp" --oversubscribe --bind-to none "$rp" train --layers "$layers" \
    --channels 384 --heads 6 --seq 256 --batch 1 --steps 1 --eval-every 0 --sample-tokens 0 \
    --threads 1 --measure-peak=0 --out "$out/run" --pp "$pp" --vpp "$v" --microbatches 8 \
    --schedule "$sch" 2>&1 | awk -v s="$sch" -v pp="$pp" '
    /^  rank [0-9]+ arena:/ {
      x = $0; sub(/.*planned /, "", x); sub(/ MiB.*/, "", x)
      y = $0; sub(/.*slot pools /, "", y); sub(/ MiB.*/, "", y)
      a = a " " x; b = b " " y; if (x + 0 > ma) ma = x + 0; if (y + 0 > mb) mb = y + 0 }
    END { if (mb == 0) { print "| " s " | " pp " | run failed | | |"; exit }
          d = 100 * (ma / mb - 1)
          printf "| %s | %s |%s |%s | %s |\n", s, pp, b, a, d == 0 ? "same" : sprintf("%+.1f%%", d) }'
done
