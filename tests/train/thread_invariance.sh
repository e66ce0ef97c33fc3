#!/bin/sh
# One rank with 1, 2, 3 and 4 compute threads trains the same model bitwise:
# losses and parameters, with ringpipe's own GEMM (OpenBLAS's results move
# with the way its products are cut, so --gemm split/blas make no such
# promise; below AVX2 there is no own GEMM and the test says it skips).
# More threads than this machine's cores make the threads straggle, so the
# kernels' work sharing (a thread out of work takes the back of another's
# share) runs with three and four owners; an ordered bias-gradient sum that
# once read a tile before its thief had written it made 3-thread runs
# differ in 4 of 4 tries on a 2-core machine.
# usage: thread_invariance.sh RINGPIPE COMPARE WORKDIR
set -eu
ringpipe=$1 compare=$2 work=$3
common="--layers 2 --channels 192 --heads 3 --seq 128 --batch 4 --steps 3 --warmup 1
        --eval-every 0 --sample-tokens 0 --measure-peak=0 --quiet --gemm own"
rm -rf "$work"
mkdir -p "$work"
if ! "$ringpipe" train $common --threads 1 --out "$work/t1" 2>"$work/t1.err"; then
  if grep -q -- "--gemm own needs" "$work/t1.err"; then
    echo "thread_invariance: skipped: $(cat "$work/t1.err")"
    exit 77
  fi
  cat "$work/t1.err" >&2
  exit 1
fi
for t in 2 3 4; do
  "$ringpipe" train $common --threads "$t" --out "$work/t$t"
done
for t in 2 3 4; do
  echo "thread_invariance: --threads $t against --threads 1"
  "$compare" "$work/t1" "$work/t$t" 0 0
done
