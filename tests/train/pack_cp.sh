#!/bin/sh
# --pack under context parallelism: 10 steps at cp 2 and cp 4, every layout
# (whole-row zigzag, per-document zigzag, cost-balanced), ring and Ulysses,
# and cp 2 x pp 2, each matching the packed single-rank run on the same rows
# (losses 1e-5 relative, parameters 1e-4; doc-zigzag's single-rank run packs
# with the same --pack-align 2P); a document the layout cannot place is
# status 2 on every rank.
set -u
ringpipe=$1 compare=$2 work=$3
shift 3
mpirun="$*"
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 2 --channels 32 --heads 4 --seq 96 --batch 4 --steps 10 --lr 1e-3 --warmup 2 --eval-every 0 --eval-batches 2 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet --file-order --pack"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for align in 1 4 8; do
  "$ringpipe" train $tiny --pack-align $align --out "$work/one_a$align" >/dev/null 2>&1 ||
    fail "single-rank packed run (align $align)"
done
for P in 2 4; do
  for layout in zigzag doc-zigzag balanced; do
    ref="$work/one_a1"
    [ "$layout" = doc-zigzag ] && ref="$work/one_a$((2 * P))"
    for impl in ring ulysses; do
      run="$work/cp${P}_${layout}_$impl"
      if ! timeout 120 $mpirun -n $P "$ringpipe" train $tiny --cp $P --cp-layout $layout \
          --cp-impl $impl --out "$run" >"$run.log" 2>&1; then
        fail "cp $P $layout $impl: $(tail -2 "$run.log")"
        continue
      fi
      if "$compare" "$ref" "$run" 1e-5 1e-4 >"$run.cmp" 2>&1; then
        echo "ok: cp $P $layout $impl matches the single-rank packed run"
      else
        fail "cp $P $layout $impl: $(tail -3 "$run.cmp")"
      fi
    done
  done
done
run="$work/cp2_pp2"
if timeout 120 $mpirun -n 4 "$ringpipe" train $tiny --cp 2 --pp 2 --cp-layout balanced \
    --batch 2 --microbatches 2 --eval-batches 4 --out "$run" >"$run.log" 2>&1; then
  if "$compare" "$work/one_a1" "$run" 1e-5 1e-4 >"$run.cmp" 2>&1; then
    echo "ok: cp 2 x pp 2 balanced matches"
  else
    fail "cp 2 x pp 2: $(tail -3 "$run.cmp")"
  fi
else
  fail "cp 2 x pp 2: $(tail -2 "$run.log")"
fi
out=$(timeout 120 $mpirun -n 2 "$ringpipe" train $tiny --cp 2 --cp-layout doc-zigzag \
  --pack-align 1 --out "$work/bad" 2>&1)
rc=$?
if [ "$rc" != 2 ] || ! printf '%s' "$out" | grep -q "cannot place document"; then
  fail "unplaceable document -> status $rc: $(printf '%s' "$out" | head -2)"
else
  echo "ok: status 2, a document doc-zigzag cannot place"
fi
[ "$fails" = 0 ] && echo "pack_cp: all ok"
exit "$fails"
