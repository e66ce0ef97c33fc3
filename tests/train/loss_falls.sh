#!/bin/sh
# A short run on the built-in corpus must learn: the byte-level loss starts near
# ln(256) = 5.55 and must fall below 2.9 (unigram byte entropy of the text is
# about 3.3 nats... a model that only learned byte frequencies would stop there).
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
"$ringpipe" train --layers 2 --channels 64 --heads 4 --seq 64 --batch 8 --steps 150 --lr 3e-3 \
  --warmup 10 --eval-every 0 --sample-tokens 0 --measure-peak=0 --out "$work" --quiet
final=$(grep '"val_loss"' "$work/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.e+-]*\).*/\1/')
echo "final validation loss: $final (bound 2.9)"
awk -v l="$final" 'BEGIN { exit !(l < 2.9) }'
