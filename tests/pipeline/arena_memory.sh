#!/bin/sh
# ZB-H1 memory after freeing at I what W does not read: on every rank of a
# pp 2 run the buffer arena the allocator accounted is the planner's arena,
# the bytes bound to live buffers at the busiest action (counted by the
# executor as it runs) are the planner's lower bound, `ringpipe sim --from`
# the run's metrics plans the same bytes, and the rank that defers its W
# (rank 1) needs less than the per-class slot pools that sized every class
# by its own peak count.
# usage: arena_memory.sh RINGPIPE WORKDIR
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
timeout 120 mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train --layers 4 --channels 32 \
  --heads 2 --seq 16 --batch 1 --steps 1 --eval-every 0 --sample-tokens 0 --threads 1 --quiet \
  --pp 2 --microbatches 4 --schedule zb-h1 --out "$work/run" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; echo "FAIL: the zb-h1 run failed"; exit 1; }
# "arena":[[planned,allocated,lower bound,pooled,measured live],[...]]
arena=$(sed -n 's/.*"arena":\[\(\[[0-9,]*\]\(,\[[0-9,]*\]\)*\)\].*/\1/p' "$work/run/metrics.jsonl")
[ -n "$arena" ] || fail "no arena figures in metrics.jsonl"
sim=$("$ringpipe" sim --schedule zb-h1 --pp 2 --microbatches 4 --from "$work/run/metrics.jsonl" \
  --timeline=0) || fail "ringpipe sim --from failed"
r=0
for row in $(echo "$arena" | tr -d '[' | tr ']' ' '); do
  row=${row#,}
  set -- $(echo "$row" | tr ',' ' ')
  planned=$1 allocated=$2 lower=$3 pooled=$4 live=$5
  [ "$allocated" = "$planned" ] || fail "rank $r: allocated $allocated bytes, planned $planned"
  [ "$live" = "$lower" ] || fail "rank $r: measured live peak $live bytes, planned lower bound $lower"
  simulated=$(echo "$sim" | awk -v r=$r '/^rank +arena planned/ { t = 1; next } t && $1 == r { print $3 }')
  [ "$simulated" = "$planned" ] || fail "rank $r: ringpipe sim plans '$simulated' bytes, the run $planned"
  if [ $r = 1 ] && [ "$planned" -ge "$pooled" ]; then
    fail "rank 1 (holds 2 W): arena $planned bytes not below the slot pools' $pooled"
  fi
  echo "rank $r: planned = allocated = sim = $planned bytes, live peak = lower bound = $lower, pools $pooled"
  r=$((r + 1))
done
[ $r = 2 ] || fail "expected 2 ranks of arena figures, got $r"
# sizes of one shape do not fit another: a clear refusal, status 2
"$ringpipe" sim --schedule zb-v --pp 2 --vpp 2 --microbatches 4 --from "$work/run/metrics.jsonl" \
  --timeline=0 >"$work/mismatch.txt" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q -- "ran --pp 2 --vpp 1" "$work/mismatch.txt"; then
  echo "ok: a v=2 schedule with the v=1 run's sizes: status 2"
else
  fail "sim --from with another --vpp: status $rc, $(cat "$work/mismatch.txt" | tail -1)"
fi
# the advisor sizes candidates by their arenas, with the part freed at I from the run
"$ringpipe" sim --advise --pp 2 --from "$work/run/metrics.jsonl" >"$work/advice.txt" 2>&1 ||
  fail "sim --advise --from failed: $(tail -1 "$work/advice.txt")"
grep -q "of which [0-9.]* freed at I" "$work/advice.txt" && ! grep -q "of which 0 freed" "$work/advice.txt" ||
  fail "the advisor did not read the part freed at I: $(grep 'memory per rank' "$work/advice.txt")"
echo "$fails failure(s)"
[ "$fails" = 0 ]
