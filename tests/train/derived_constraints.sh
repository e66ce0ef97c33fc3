#!/bin/sh
# Constraints follow from what was built, not from how it was spelled: a
# schedule whose backward is split into I and W (zb-h1, its alias zbh1, or a
# CSV file holding I/W actions) cannot run with --sp (sequence parallelism's
# backward has no I/W split); every spelling is refused with status 2 and one
# message on every rank, before anything runs. --recompute runs with all of
# them (W recomputes what it reads).
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --microbatches 2 --steps 2
      --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet --pp 2"
"$ringpipe" sim --schedule zb-h1 --pp 2 --microbatches 2 --csv "$work/zb.csv" >/dev/null
fails=0
for sch in zb-h1 zbh1 "$work/zb.csv"; do
  out=$(timeout 60 mpirun -n 4 --oversubscribe --bind-to none "$ringpipe" train $tiny --tp 2 \
        --sp --schedule "$sch" --out "$work/run" 2>&1)
  got=$?
  n=$(printf '%s\n' "$out" | grep -c "cannot be combined with --schedule")
  if [ "$got" = 2 ] && [ "$n" = 1 ] && [ ! -e "$work/run" ]; then
    echo "ok: --schedule $sch --sp: status 2, one message"
  else
    echo "FAIL: --schedule $sch --sp: status $got, $n messages:"
    printf '%s\n' "$out" | head -5
    fails=$((fails + 1))
  fi
done
# and every spelling trains with recompute, as does a schedule without I/W
for sch in zbh1 "$work/zb.csv" 1f1b; do
  rm -rf "$work/ok"
  timeout 60 mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train $tiny --schedule "$sch" \
    --recompute full --out "$work/ok" >/dev/null 2>&1 ||
    { echo "FAIL: $sch + recompute full"; fails=$((fails + 1)); }
done
[ "$fails" = 0 ]
