#!/bin/sh
# `--profile` prints the step profile at the end of `train` and of `bench train`
# (which once accepted the option and printed nothing): every part's row, the
# step's wall row, and ms/step figures that add up to the wall within 5 % (and
# the rounding of each row's two decimals).
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
small="--layers 2 --channels 64 --heads 2 --seq 64 --batch 2 --steps 4 --measure-peak=0"
check() { # $1 = label, $2 = output file
  for part in "GEMM" "attention" "layernorm" "optimizer" "idle / untimed" "step (wall)"; do
    grep -q "^  $part" "$2" || { echo "$1 --profile: no '$part' row"; cat "$2"; exit 1; }
  done
  grep -q '^  by kernel:' "$2" && grep -q '^    fwd matmul' "$2" ||
    { echo "$1 --profile: no per-kernel rows"; cat "$2"; exit 1; }
  grep -q '^step profile (this rank, mean of [1-9][0-9]* steps)' "$2" ||
    { echo "$1 --profile: no profile header"; cat "$2"; exit 1; }
  awk -v label="$1" '/^  part /{t=1; next} t && /^  step \(wall\)/{wall=$3; t=0; next}
       t && NF > 1 { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { sum += $i; rows++; break } }
       END { slack = 0.05 * wall + 0.005 * rows
             if (wall <= 0 || sum < wall - slack || sum > wall + slack) {
               printf "%s --profile: parts add to %.3f ms against a wall of %.3f\n", label, sum, wall; exit 1 }
             printf "%s --profile: parts %.3f ms of a %.3f ms step\n", label, sum, wall }' "$2"
}
# shellcheck disable=SC2086
"$ringpipe" bench train $small --profile > "$work/bench.txt"
check "bench train" "$work/bench.txt"
# shellcheck disable=SC2086
"$ringpipe" train $small --eval-every 0 --sample-tokens 0 --quiet --profile --out "$work/run" \
  > "$work/train.txt"
check "train" "$work/train.txt"
