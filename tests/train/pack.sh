#!/bin/sh
# Training with --pack on one rank: 10 steps with flash attention match the
# O(T^2) reference with its explicit mask (losses 1e-5 relative, parameters
# 1e-4), the loss falls, a micro-batch split gives the same steps, and bad
# input (a packed layout without --pack, a shard without a document index, an index that
# does not match its shard) is status 2 with a message.
set -u
ringpipe=$1 compare=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 2 --channels 32 --heads 4 --seq 96 --batch 4 --steps 10 --lr 1e-3 --warmup 2 --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet --file-order --eval-batches 2"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
"$ringpipe" train $tiny --pack --attention flash --out "$work/flash" || fail "packed flash run"
"$ringpipe" train $tiny --pack --attention naive --out "$work/naive" || fail "packed reference run"
"$compare" "$work/flash" "$work/naive" 1e-5 1e-4 || fail "packed flash vs reference"
"$ringpipe" train $tiny --pack --batch 2 --microbatches 2 --eval-batches 4 --out "$work/mb2" || fail "micro-batched run"
"$compare" "$work/flash" "$work/mb2" 1e-5 1e-4 || fail "packed 4 rows vs 2 x 2 micro-batches"
first=$(grep '"loss"' "$work/flash/metrics.jsonl" | head -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
last=$(grep '"loss"' "$work/flash/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
echo "packed loss: step 1 $first, step 10 $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.05) }' || fail "packed loss did not fall"

. "$(dirname "$0")/expect.sh"
expect 2 "places packed documents; add --pack" -- "$ringpipe" train $tiny --cp 2 --cp-layout balanced --out "$work/x1"
mkdir -p "$work/noidx"
cp "$work/flash/data/train.bin" "$work/flash/data/val.bin" "$work/noidx/"
expect 2 "no document index" -- "$ringpipe" train $tiny --pack --data "$work/noidx" --out "$work/x2"
"$ringpipe" train $tiny --pack --data "$work/noidx" --eot 10 --steps 1 --out "$work/x3" ||
  fail "--eot splits shards without an index"
cp "$work/flash/data/val.docs" "$work/noidx/train.docs"
expect 2 "belongs to other data" -- "$ringpipe" train $tiny --pack --data "$work/noidx" --out "$work/x4"
[ "$fails" = 0 ] && echo "pack: all ok"
exit "$fails"
