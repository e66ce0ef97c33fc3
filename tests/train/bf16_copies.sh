#!/bin/sh
# --precision bf16 with round-to-nearest weight copies: AdamW writes the copies
# in its own pass (rp_dp_set_bf16_copies) instead of a separate conversion
# after it. ZeRO-1 keeps the separate pass (most parameters arrive by the
# all-gather), so on one rank `--zero 1` is the same training through the old
# path: the two runs must be bitwise equal, plain and with every step rolled
# back and redone (--post-validate always-rollback: the restored weights make
# the speculative step's copies stale). Stochastic copies (--bf16-stochastic)
# keep the separate pass whatever the layout.
# usage: bf16_copies.sh RINGPIPE COMPARE WORKDIR
set -eu
ringpipe=$1 compare=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
common="--layers 3 --channels 64 --heads 2 --seq 32 --batch 2 --steps 6 --lr 3e-3 --warmup 2
        --grad-clip 0.5 --eval-every 3 --eval-batches 2 --sample-tokens 0 --measure-peak=0
        --threads 2 --precision bf16"
fails=0
run() { # run NAME ARGS...
  name=$1
  shift
  # shellcheck disable=SC2086
  timeout 120 "$ringpipe" train $common --out "$work/$name" "$@" >"$work/$name.log" 2>&1 ||
    { echo "FAIL: run $name ($*)"; tail -5 "$work/$name.log"; exit 1; }
}
for case in "plain" "rollback --post-validate always-rollback"; do
  set -- $case
  tag=$1
  shift
  run "$tag-fused" "$@"
  run "$tag-zero" --zero 1 "$@"
  if "$compare" "$work/$tag-fused" "$work/$tag-zero" 0 0 >"$work/$tag.cmp" 2>&1; then
    echo "ok: $tag: the copies written by AdamW train bitwise as the separate pass"
  else
    echo "FAIL: $tag: the fused copies differ:"; cat "$work/$tag.cmp"; fails=$((fails + 1))
  fi
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
