#!/bin/sh
# Optimizer post-validation: --post-validate on (the update before the global
# norm and loss are known, rolled back when clipping applies) and
# always-rollback (every step restored and redone) train bitwise what the
# synchronous path trains, on a pipeline (zb-v, pp 2) with a clip that applies
# in some steps but not all, and under ZeRO-1 data parallelism.
# usage: post_validate.sh RINGPIPE COMPARE WORKDIR
set -eu
ringpipe=$1 compare=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
common="--layers 4 --channels 32 --heads 2 --seq 32 --batch 2 --microbatches 4 --steps 8
        --lr 3e-3 --warmup 2 --grad-clip 1.3 --eval-every 0 --sample-tokens 0 --measure-peak=0
        --threads 1 --quiet"
"$ringpipe" train $common --steps 0 --out "$work/data_run" >/dev/null
fails=0
run() { # run NAME NP ARGS...
  name=$1 np=$2
  shift 2
  timeout 120 mpirun -n "$np" --oversubscribe --bind-to none "$ringpipe" train $common \
    --data "$work/data_run/data" --out "$work/$name" "$@" >"$work/$name.log" 2>&1 ||
    { echo "FAIL: run $name ($*)"; tail -5 "$work/$name.log"; exit 1; }
}
for layout in "pp 2 --pp 2 --vpp 2 --schedule zb-v" "zero 2 --zero 1"; do
  set -- $layout
  tag=$1 np=$2
  shift 2
  run "$tag-sync" "$np" "$@"
  run "$tag-on" "$np" "$@" --post-validate on
  run "$tag-always" "$np" "$@" --post-validate always-rollback
  rolled=$(sed -n 's/^post-validation: \([0-9]*\) of.*/\1/p' "$work/$tag-on.log")
  echo "$tag: --post-validate on rolled back ${rolled:-?} of 8 steps (clipping)"
  # the clip must apply in some steps and not in others, or the test proves less
  case $rolled in 0 | 8 | "") echo "FAIL: $tag: want a clip in some steps, got '$rolled'";
    fails=$((fails + 1)) ;; esac
  for mode in on always; do
    if "$compare" "$work/$tag-sync" "$work/$tag-$mode" 0 0 >"$work/$tag-$mode.cmp" 2>&1; then
      echo "ok: $tag --post-validate $mode is bitwise the synchronous run"
    else
      echo "FAIL: $tag --post-validate $mode differs:"; cat "$work/$tag-$mode.cmp"
      fails=$((fails + 1))
    fi
  done
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
