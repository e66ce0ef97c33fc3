#!/bin/sh
# Checkpoints under tensor parallelism hold whole tensors with GPT-2 names:
# a run saved at step 2 under tp 2 x pp 2 resumes under tp 1 (one rank), tp 4
# and dp 2 with ZeRO-1 (the shards, optimizer state included, re-sliced on
# load), and one saved on one rank resumes under tp 2 x dp 2 with ZeRO-1; the
# losses after the resume match the run that never stopped within 1e-6
# relative, the final parameters within 1e-3 (the layout tests' bound). The
# global batch stays 8 sequences.
# usage: resume_tp.sh RINGPIPE COMPARE WORKDIR
set -u
ringpipe=$1 compare=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
common="--layers 2 --channels 32 --heads 4 --seq 32 --batch 2 --steps 4 --warmup 1
        --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
"$ringpipe" train $common --steps 0 --out "$work/prep" >/dev/null || exit 1
common="$common --data $work/prep/data"
fails=0
run_np() { # run_np NP train-args...
  np=$1
  shift
  [ "$np" = 1 ] && set -- "$ringpipe" train "$@" ||
    set -- mpirun -n "$np" --oversubscribe --bind-to none "$ringpipe" train "$@"
  "$@"
}
# straight NAME NP FLAGS: the uninterrupted run, saving at step 2
straight() {
  run_np "$2" $common $3 --ckpt-every 2 --keep-ckpts 2 --out "$work/$1" >"$work/$1.log" 2>&1 ||
    { echo "FAIL: the run $1 ($3) failed"; tail -3 "$work/$1.log"; exit 1; }
}
# resumed FROM NAME NP FLAGS: step 2 of FROM continued under another layout
resumed() {
  from=$1 d="$work/$2"
  cp -r "$work/$from" "$d"
  if ! run_np "$3" $common $4 --resume "$d/ckpt-000002" --out "$d" >"$d.log" 2>&1; then
    echo "FAIL: $2: resuming under '$4' failed"; tail -3 "$d.log"; fails=$((fails + 1)); return
  fi
  grep -q "saved under dp" "$d.log" || { echo "FAIL: $2: no layout-change note"; fails=$((fails + 1)); }
  if out=$("$compare" "$work/$from" "$d" 1e-6 1e-3 2>&1); then
    echo "ok: $2: $(printf '%s' "$out" | head -1)"
  else
    echo "FAIL: $2: $out"
    fails=$((fails + 1))
  fi
}
straight tp2pp2 4 "--tp 2 --pp 2 --microbatches 4"
resumed tp2pp2 to_tp1 1 "--microbatches 4"
resumed tp2pp2 to_tp4 4 "--tp 4 --microbatches 4"
resumed tp2pp2 to_dp2_zero1 2 "--zero 1 --microbatches 2"
straight one 1 "--microbatches 4"
resumed one to_tp2_dp2_zero1 4 "--tp 2 --zero 1 --microbatches 2"
echo "$fails failure(s)"
[ "$fails" = 0 ]
