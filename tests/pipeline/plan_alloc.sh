#!/bin/sh
# One buffer plan: for every schedule generator (and a CSV that delays its
# SEND_Bs past a whole backward) the simulator's per-rank plan (activation
# slots, W stashes, receive and gradient-send buffers) is exactly what the
# executor allocates in a real run (the "slots" of the pipeline report).
# usage: plan_alloc.sh RINGPIPE WORKDIR
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 8 --channels 32 --heads 2 --seq 16 --batch 1 --steps 1 --eval-every 0
      --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
fails=0
# the simulator's plan: "rank ... W stash  recv bufs  act slots  grad bufs" rows
sim_plan() { # sim_plan ARGS... -> "act,wst,rbuf,gbuf" per rank, space separated
  "$ringpipe" sim "$@" | awk '/^rank +busy/ { t = 1; next } t && /^[0-9]+ / {
    printf "%s[%d,%d,%d,%d]", n++ ? "," : "", $8, $6, $7, $9 } /^makespan/ { t = 0 }'
}
run_plan() { # run_plan NP ARGS... -> the executor's slots from metrics.jsonl
  np=$1
  shift
  rm -rf "$work/run"
  timeout 120 mpirun -n "$np" --oversubscribe --bind-to none "$ringpipe" train $tiny "$@" \
    --out "$work/run" >/dev/null 2>&1 || { echo "train failed: $*"; return; }
  sed -n 's/.*"slots":\[\(.*\]\)\],"makespan.*/\1/p' "$work/run/metrics.jsonl"
}
check() { # check NP P M V SCHEDULE
  np=$1 p=$2 m=$3 v=$4 sch=$5
  want=$(sim_plan --schedule "$sch" --pp "$p" --microbatches "$m" --vpp "$v")
  got=$(run_plan "$np" --pp "$p" --microbatches "$m" --vpp "$v" --schedule "$sch")
  if [ -n "$want" ] && [ "$want" = "$got" ]; then
    echo "ok: $sch p=$p m=$m v=$v: plan = allocation = $want"
  else
    echo "FAIL: $sch p=$p m=$m v=$v: simulator plans '$want', executor allocated '$got'"
    fails=$((fails + 1))
  fi
}
for sch in naive gpipe 1f1b zb-h1; do check 2 2 4 1 $sch; done
check 2 2 4 2 interleaved
check 4 4 8 1 zb-h1
check 4 4 8 1 1f1b
# beyond ZB-H1: 2p-1 slots, the V (with its turn's local gradient buffer)
check 2 2 4 1 zb-h2
check 2 2 4 2 zb-v
check 2 2 4 2 dualpipev
check 4 4 8 2 zb-v
check 4 4 8 2 dualpipev
check 4 4 8 2 zb-v-min
# GPipe with rank 1's SEND_Bs all moved after its last B: 8 input gradients wait
# at once (a fixed ring of 4 send buffers would have been overwritten)
"$ringpipe" sim --schedule gpipe --pp 2 --microbatches 8 --csv "$work/gpipe.csv" >/dev/null
awk -F, 'NR == 3 { keep = ""; sends = ""
  for (i = 1; i <= NF; i++) if ($i ~ /SEND_B/) sends = sends "," $i; else keep = keep (keep == "" ? "" : ",") $i
  print keep sends; next } { print }' "$work/gpipe.csv" >"$work/delayed.csv"
check 2 2 8 1 "$work/delayed.csv"
# and trains what gpipe trains, bitwise: the step-2 loss sees step 1's gradients
loss_of() { sed -n 's/.*"step":2,"loss":\([^,]*\),.*/\1/p' "$work/run/metrics.jsonl"; }
run_plan 2 --pp 2 --microbatches 8 --schedule "$work/delayed.csv" --steps 2 >/dev/null
delayed_loss=$(loss_of)
run_plan 2 --pp 2 --microbatches 8 --schedule gpipe --steps 2 >/dev/null
if [ -n "$delayed_loss" ] && [ "$delayed_loss" = "$(loss_of)" ]; then
  echo "ok: the delayed CSV trains gpipe's step-2 loss bitwise ($delayed_loss)"
else
  echo "FAIL: the delayed CSV's step-2 loss '$delayed_loss' differs from gpipe's '$(loss_of)'"
  fails=$((fails + 1))
fi
case $(sim_plan --schedule "$work/delayed.csv" --pp 2 --microbatches 8) in
  *"[8,0,1,8]"*) echo "ok: the delayed SEND_Bs hold 8 gradient-send buffers" ;;
  *) echo "FAIL: the delayed CSV should plan 8 gradient-send buffers on rank 1"; fails=$((fails + 1)) ;;
esac
echo "$fails failure(s)"
[ "$fails" = 0 ]
