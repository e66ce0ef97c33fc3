#!/bin/sh
# Restart with another layout: a run saved at step 2 under one layout (dp x pp x
# cp, ZeRO-1) resumes under another (and another world size); its next losses
# and final parameters match the run that never stopped (1e-5 / 1e-3 relative,
# as the layout tests: the reduction order differs between layouts). The
# global batch (batch x micro-batches x dp) stays 8 sequences throughout.
# usage: resume_layouts.sh RINGPIPE COMPARE WORKDIR
set -u
ringpipe=$1 compare=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
common="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --steps 4 --warmup 1
        --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
"$ringpipe" train $common --steps 0 --out "$work/prep" >/dev/null || exit 1
common="$common --data $work/prep/data"
fails=0
launch() { # launch NP train-args...
  np=$1
  shift
  if [ "$np" = 1 ]; then
    "$ringpipe" train "$@"
  else
    mpirun -n "$np" --oversubscribe --bind-to none "$ringpipe" train "$@"
  fi
}
# case NAME SAVE_NP "SAVE FLAGS" RESUME_NP "RESUME FLAGS"
case_() {
  name=$1 snp=$2 sflags=$3 rnp=$4 rflags=$5
  d="$work/$name"
  if ! launch "$snp" $common $sflags --ckpt-every 2 --keep-ckpts 2 --out "$d.straight" >"$d.log" 2>&1; then
    echo "FAIL: $name: the run under '$sflags' failed"; tail -3 "$d.log"; fails=$((fails + 1)); return
  fi
  cp -r "$d.straight" "$d.split"
  if ! launch "$rnp" $common $rflags --resume "$d.split/ckpt-000002" --out "$d.split" >>"$d.log" 2>&1; then
    echo "FAIL: $name: the resume under '$rflags' failed"; tail -3 "$d.log"; fails=$((fails + 1)); return
  fi
  if out=$("$compare" "$d.straight" "$d.split" 1e-5 1e-3 2>&1); then
    echo "ok: $name: $(printf '%s' "$out" | head -1)"
  else
    echo "FAIL: $name: $out"
    fails=$((fails + 1))
  fi
}
case_ dp2xpp2_to_1       4 "--pp 2 --microbatches 2"  1 "--microbatches 4"
case_ pp2_to_dp2         2 "--pp 2 --microbatches 4"  2 "--microbatches 2"
case_ dp2_to_pp2         2 "--microbatches 2"         2 "--pp 2 --microbatches 4"
case_ cp2_to_pp2         2 "--cp 2 --microbatches 4"  2 "--pp 2 --microbatches 4"
case_ zero1_to_1         2 "--zero 1 --microbatches 2" 1 "--microbatches 4"
case_ 1_to_dp2xpp2_zero1 1 "--microbatches 4"         4 "--pp 2 --zero 1 --microbatches 2"
echo "$fails failure(s)"
[ "$fails" = 0 ]
