#!/bin/sh
# Save at step k, resume, continue: losses and parameters bitwise equal to an
# uninterrupted run (AdamW state, data position and learning-rate schedule all
# come back from the checkpoint).
# usage: resume.sh RINGPIPE COMPARE WORKDIR NP [train flags for the layout...]
set -eu
ringpipe=$1 compare=$2 work=$3 np=$4
shift 4
run="$ringpipe"
[ "$np" -gt 1 ] && run="mpirun -n $np --oversubscribe --bind-to none $ringpipe"
common="--layers 4 --channels 32 --heads 2 --seq 32 --batch 2 --microbatches 4 --steps 12
        --warmup 3 --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
rm -rf "$work"
mkdir -p "$work"
$run train $common "$@" --out "$work/straight"
$run train $common "$@" --out "$work/split" --data "$work/straight/data" --stop-after 5
$run train $common "$@" --out "$work/split" --data "$work/straight/data" --resume "$work/split/ckpt"
"$compare" "$work/straight" "$work/split" 0 0
