#!/bin/sh
# Constraints follow from what was built, not from how it was spelled: a
# schedule whose backward is split into I and W (zb-h1, its alias zbh1, or a
# CSV file holding I/W actions) cannot run with --recompute; every spelling is
# refused with status 2 and one message on every rank, before anything runs.
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --microbatches 2 --steps 2
      --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet --pp 2"
"$ringpipe" sim --schedule zb-h1 --pp 2 --microbatches 2 --csv "$work/zb.csv" >/dev/null
fails=0
for sch in zb-h1 zbh1 "$work/zb.csv"; do
  for rc in selective full; do
    out=$(timeout 60 mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train $tiny \
          --schedule "$sch" --recompute $rc --out "$work/run" 2>&1)
    got=$?
    n=$(printf '%s\n' "$out" | grep -c "cannot be combined with --schedule")
    if [ "$got" = 2 ] && [ "$n" = 1 ] && [ ! -e "$work/run" ]; then
      echo "ok: --schedule $sch --recompute $rc: status 2, one message"
    else
      echo "FAIL: --schedule $sch --recompute $rc: status $got, $n messages:"
      printf '%s\n' "$out" | head -5
      fails=$((fails + 1))
    fi
  done
done
# and a schedule without I/W trains with recompute
timeout 60 mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train $tiny --schedule 1f1b \
  --recompute full --out "$work/ok" >/dev/null 2>&1 || { echo "FAIL: 1f1b + recompute"; fails=$((fails + 1)); }
[ "$fails" = 0 ]
