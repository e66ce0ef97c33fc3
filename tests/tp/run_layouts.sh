#!/bin/sh
# Tensor-parallel layouts against one rank, sharing the one-rank reference run
# (the setup of tests/pipeline/run_layout.sh -- data, 10 steps, lr -- with 4 layers
# instead of 8; one reference for all layouts: both keep the suite fast).
# usage: run_layouts.sh RINGPIPE COMPARE WORKDIR LOSS_RTOL PARAM_RTOL "EXTRA" LAYOUT...
#   EXTRA: flags for both runs (e.g. --precision bf16); LAYOUT: "NAME NP FLAGS..."
set -u
ringpipe=$1 compare=$2 work=$3 ltol=$4 ptol=$5 extra=$6
shift 6
common="--layers 4 --channels 64 --heads 4 --seq 64 --batch 2 --microbatches 8 --steps 10
        --lr 3e-3 --warmup 2 --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1
        --quiet $extra"
rm -rf "$work"
mkdir -p "$work"
"$ringpipe" train $common --steps 0 --out "$work/data_run" >/dev/null || exit 1
"$ringpipe" train $common --data "$work/data_run/data" --out "$work/single" >/dev/null || exit 1
fails=0
for layout in "$@"; do
  set -- $layout
  name=$1 np=$2
  shift 2
  if ! timeout 120 mpirun -n "$np" --oversubscribe --bind-to none --mca btl self,vader,tcp \
      "$ringpipe" train $common --data "$work/data_run/data" --out "$work/$name" "$@" \
      >"$work/$name.log" 2>&1; then
    echo "FAIL: $name ($*) did not train"; tail -3 "$work/$name.log"; fails=$((fails + 1))
    continue
  fi
  # the run really was tensor-parallel: its checkpoint records the layout
  tp=$(printf '%s\n' "$*" | sed -n 's/.*--tp \([0-9]*\).*/\1/p')
  if ! grep -q "\"layout\":{[^}]*\"tp\":$tp}" "$work/$name/ckpt/meta.json"; then
    echo "FAIL: $name: its checkpoint does not record tp $tp"; fails=$((fails + 1))
    continue
  fi
  if out=$("$compare" "$work/single" "$work/$name" "$ltol" "$ptol" 2>&1); then
    echo "ok: $name: $(printf '%s' "$out" | grep -v agree | tr '\n' ';')"
  else
    echo "FAIL: $name ($*): $out"
    fails=$((fails + 1))
  fi
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
