#!/bin/sh
# The schedule grid on the executor (schedule_grid.c, 4 ranks: p = 2, 3, 4),
# then `ringpipe train` with refused schedules: every rank must exit with
# status 2 within the timeout (a hang or a crash on any rank fails).
# usage: schedule_grid.sh GRID RINGPIPE WORKDIR
set -u
grid=$1 ringpipe=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fails=0
timeout 100 mpirun -n 4 --oversubscribe --bind-to none "$grid" >"$work/grid.log" 2>&1
rc=$?
grep -c '^ok' "$work/grid.log" | sed 's/^/grid cells ok: /'
grep -v '^ok' "$work/grid.log"
[ "$rc" = 0 ] || { echo "FAIL: the grid exited with $rc (124: a hang)"; fails=$((fails + 1)); }
# one line: it goes into the sh -c command below
tiny="--layers 8 --channels 16 --heads 2 --seq 8 --batch 1 --steps 1 --eval-every 0"
tiny="$tiny --sample-tokens 0 --measure-peak=0 --threads 1 --quiet --emulate-compute 1,2,1"
refused() { # refused NP WHAT ARGS...: each rank's exit status must be 2
  np=$1 what=$2
  shift 2
  rm -f "$work"/rc.*
  timeout 30 mpirun -n "$np" --oversubscribe --bind-to none sh -c \
    "\"$ringpipe\" train $tiny --out \"$work/run\" $* >\"$work/out.\$OMPI_COMM_WORLD_RANK\" 2>&1; \
     echo \$? >\"$work/rc.\$OMPI_COMM_WORLD_RANK\"" >/dev/null 2>&1
  got=$(cat "$work"/rc.* 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  if [ "$(cat "$work"/rc.* 2>/dev/null | grep -c '^2$')" = "$np" ]; then
    echo "ok: $what: status 2 on all $np ranks: $(grep -h error "$work"/out.* | head -1)"
  else
    echo "FAIL: $what ($*): exit statuses (count status) '$got', want 2 on $np ranks"
    fails=$((fails + 1))
  fi
}
refused 4 "dualpipev m < 2p" --pp 4 --vpp 2 --schedule dualpipev --microbatches 7
refused 4 "zb-v m < p" --pp 4 --vpp 2 --schedule zb-v --microbatches 3
refused 2 "zb-v without --vpp 2" --pp 2 --schedule zb-v --microbatches 4
refused 4 "zb-h2 m < p" --pp 4 --schedule zb-h2 --microbatches 2
refused 4 "2p stages, fewer layers" --pp 4 --vpp 2 --schedule zb-v --microbatches 8 --layers 6
refused 4 "zb-v with --sp" --pp 2 --vpp 2 --tp 2 --sp --schedule zb-v --microbatches 4
# the advisor reads a run's measured costs and sizes from its metrics.jsonl
timeout 60 mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train $tiny --pp 2 \
  --schedule zb-h1 --microbatches 4 --out "$work/measured" >/dev/null 2>&1
if "$ringpipe" sim --advise --pp 2 --from "$work/measured/metrics.jsonl" --memory-limit 1 \
     >"$work/advice.txt" 2>&1 && grep -q '^choice: --schedule' "$work/advice.txt" &&
   grep -q 'from .*metrics.jsonl' "$work/advice.txt"; then
  echo "ok: advice from a run's metrics: $(grep '^choice' "$work/advice.txt")"
else
  echo "FAIL: ringpipe sim --advise --from the run's metrics:"; cat "$work/advice.txt"
  fails=$((fails + 1))
fi
"$ringpipe" sim --advise --pp 2 --from "$work/nothing.jsonl" >/dev/null 2>&1
rc=$?
[ "$rc" = 2 ] && echo "ok: --from a missing file: status 2" ||
  { echo "FAIL: --from a missing file: status $rc, want 2"; fails=$((fails + 1)); }
echo "$fails failure(s)"
[ "$fails" = 0 ]
