#!/bin/sh
# --weight-cache: the own GEMM (and the bf16 GEMM, --precision bf16) keeps
# each weight's packs for a step's later micro-batches; the runs must be
# bitwise those without it, in every layout that reuses weights within a step
# or changes them between steps: gradient accumulation, full recompute, a V
# pipeline whose every step is rolled back and redone (--post-validate
# always-rollback: the weights change under the cache between steps), ZeRO-1
# data parallelism (the all-gathered parameters), and bf16 with gradient
# accumulation and with a rolled-back pipeline (the bf16 weight copies change
# between steps). Each cached run must report packs reused. At an ISA ceiling
# with no own GEMM kernel (scalar) --gemm own is refused and so is this test's
# subject: it says so and passes.
# usage: weight_cache.sh RINGPIPE COMPARE WORKDIR
set -eu
ringpipe=$1 compare=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
common="--layers 4 --channels 64 --heads 2 --seq 32 --batch 2 --steps 6 --lr 3e-3 --warmup 2
        --grad-clip 1.3 --eval-every 3 --eval-batches 2 --sample-tokens 0 --measure-peak=0
        --threads 1 --gemm own"
if ! "$ringpipe" train $common --steps 0 --out "$work/data_run" >"$work/data_run.log" 2>&1; then
  if grep -q "gemm own needs" "$work/data_run.log"; then
    echo "skipped: no own GEMM kernel at this ISA ceiling ($(grep -o 'ceiling is [^;]*' "$work/data_run.log"))"
    exit 0
  fi
  cat "$work/data_run.log"; exit 1
fi
fails=0
run() { # run NAME NP ARGS...
  name=$1 np=$2
  shift 2
  timeout 120 mpirun -n "$np" --oversubscribe --bind-to none "$ringpipe" train $common \
    --data "$work/data_run/data" --out "$work/$name" "$@" >"$work/$name.log" 2>&1 ||
    { echo "FAIL: run $name ($*)"; tail -5 "$work/$name.log"; exit 1; }
}
for layout in "accum 1 --microbatches 4" "recompute 1 --recompute full" \
              "pp 2 --pp 2 --vpp 2 --schedule zb-v --microbatches 4 --post-validate always-rollback" \
              "zero 2 --zero 1 --microbatches 2" \
              "bf16 1 --precision bf16 --microbatches 4" \
              "bf16-pp 2 --precision bf16 --pp 2 --microbatches 4 --post-validate always-rollback"; do
  set -- $layout
  tag=$1 np=$2
  shift 2
  run "$tag-off" "$np" "$@"
  run "$tag-on" "$np" "$@" --weight-cache
  reused=$(sed -n 's/^weight cache (rank 0): .* made, \([0-9]*\) reused.*/\1/p' "$work/$tag-on.log")
  if [ -z "$reused" ] || [ "$reused" -le 0 ]; then
    echo "FAIL: $tag: the cached run reports no reused packs ('$reused')"; fails=$((fails + 1))
  fi
  if grep -q "^weight cache" "$work/$tag-off.log"; then
    echo "FAIL: $tag: the run without --weight-cache reports a cache"; fails=$((fails + 1))
  fi
  if "$compare" "$work/$tag-off" "$work/$tag-on" 0 0 >"$work/$tag.cmp" 2>&1; then
    echo "ok: $tag: --weight-cache ($reused packs reused) is bitwise the run without it"
  else
    echo "FAIL: $tag: --weight-cache differs:"; cat "$work/$tag.cmp"; fails=$((fails + 1))
  fi
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
