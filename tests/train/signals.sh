#!/bin/sh
# Stop signals: a run sent SIGTERM (1 rank), SIGUSR1 through mpirun (pp 2) or
# SIGTERM to one rank alone (dp 2) finishes its step, saves, prints one line and
# exits 0 on every rank, leaving a complete checkpoint and no temporaries;
# resuming from it gives losses and parameters bitwise equal to a run that was
# never interrupted.
# usage: signals.sh RINGPIPE COMPARE WORKDIR
set -u
ringpipe=$1 compare=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
mpi="mpirun -n 2 --oversubscribe --bind-to none"
tiny="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --microbatches 2 --warmup 3
      --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# the same data for every run
"$ringpipe" train $tiny --steps 0 --out "$work/prep" >/dev/null || exit 1
data="--data $work/prep/data"

# waits up to 60 s for process $1 to exit (status in $rc); kills it after that
wait_for_exit() {
  n=0
  while kill -0 "$1" 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
  if kill -0 "$1" 2>/dev/null; then
    kill -KILL "$1"
    fail "process $1 did not exit within 60 s of the signal"
  fi
  wait "$1"
  rc=$?
}

# waits until a step line from step 3 on appears in log $1 (at most 60 s)
wait_for_steps() {
  n=0
  until grep -q "^step *[3-9][0-9]*/\|^step *[1-9][0-9][0-9]*/" "$1" 2>/dev/null; do
    sleep 0.1
    n=$((n + 1))
    [ $n -lt 600 ] || { fail "no step line in $1 after 60 s"; return 1; }
  done
}

# check NAME OUTDIR LOG: status 0, one stop line, a complete checkpoint, no
# temporaries; sets $stopped to the step it stopped at
check_stopped() {
  name=$1 out=$2 log=$3
  [ "$rc" = 0 ] || fail "$name: exit status $rc (want 0)"
  lines=$(grep -c "^stopped by SIG" "$log")
  [ "$lines" = 1 ] || fail "$name: $lines 'stopped by' lines (want 1)"
  stopped=$(sed -n 's/^stopped by SIG[A-Z0-9]* at step \([0-9]*\) .*/\1/p' "$log")
  [ -n "$stopped" ] || { fail "$name: no step in the stop line"; tail -5 "$log"; stopped=0; }
  [ -f "$out/ckpt/meta.json" ] || fail "$name: no complete checkpoint in $out/ckpt"
  debris=$(find "$out" -name '*.tmp-*' -o -name '*.old-*' -o -name '*.link-*')
  [ -z "$debris" ] || fail "$name: temporaries left: $debris"
  grep -q "fatal" "$log" && fail "$name: a fatal line in the output"
  echo "$name: stopped at step $stopped, status $rc"
}

# resume_matches NAME LAUNCH OUT FLAGS: resume 3 more steps from OUT/ckpt and
# compare with a run of the same length that was never stopped
resume_matches() {
  name=$1 launch=$2 out=$3
  shift 3
  $launch "$ringpipe" train $tiny $data "$@" --quiet --steps 100000 --resume "$out/ckpt" \
    --stop-after 3 --out "$out" >"$out.resume.log" 2>&1 || fail "$name: resume failed"
  $launch "$ringpipe" train $tiny $data "$@" --quiet --steps 100000 \
    --stop-after $((stopped + 3)) --out "$out.straight" >"$out.straight.log" 2>&1 ||
    fail "$name: the uninterrupted run failed"
  "$compare" "$out.straight" "$out" 0 0 || fail "$name: resumed run differs from the straight one"
}

# 1 rank, SIGTERM
"$ringpipe" train $tiny $data --steps 100000 --out "$work/one" >"$work/one.log" 2>&1 &
pid=$!
wait_for_steps "$work/one.log" && kill -TERM $pid
wait_for_exit $pid
check_stopped "1 rank, SIGTERM" "$work/one" "$work/one.log"
resume_matches "1 rank" "" "$work/one"

# pp 2 under mpirun, SIGUSR1 to mpirun (forwarded to every rank)
$mpi "$ringpipe" train $tiny $data --pp 2 --steps 100000 --out "$work/pp2" >"$work/pp2.log" 2>&1 &
pid=$!
wait_for_steps "$work/pp2.log" && kill -USR1 $pid
wait_for_exit $pid
check_stopped "pp 2, SIGUSR1 to mpirun" "$work/pp2" "$work/pp2.log"
resume_matches "pp 2" "$mpi" "$work/pp2" --pp 2

# dp 2 under mpirun, SIGTERM to rank 1 alone: the ranks agree and both stop
$mpi "$ringpipe" train $tiny $data --steps 100000 --out "$work/dp2" >"$work/dp2.log" 2>&1 &
pid=$!
if wait_for_steps "$work/dp2.log"; then
  ranks=$(pgrep -P $pid)
  set -- $ranks
  [ $# = 2 ] || fail "dp 2: expected 2 rank processes under mpirun, found: $ranks"
  kill -TERM "$2"
fi
wait_for_exit $pid
check_stopped "dp 2, SIGTERM to one rank" "$work/dp2" "$work/dp2.log"
resume_matches "dp 2" "$mpi" "$work/dp2"

echo "$fails failure(s)"
[ "$fails" = 0 ]
