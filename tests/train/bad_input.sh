#!/bin/sh
# Bad input: one clear message naming the value and the fix, exit status 2,
# nothing half-written, and under mpirun every rank exits (no hang).
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --steps 2 --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
fails=0
expect() { # expect STATUS PATTERN -- command...
  want=$1 pat=$2
  shift 3
  out=$("$@" 2>&1)
  got=$?
  if [ "$got" != "$want" ] || ! printf '%s' "$out" | grep -q -- "$pat"; then
    echo "FAIL: $* -> status $got (want $want), output:"
    printf '%s\n' "$out" | tail -5
    fails=$((fails + 1))
  else
    echo "ok: status $got, '$pat'"
  fi
}
expect 2 "unknown option --layer" -- "$ringpipe" train --layer 4
expect 2 "out of range" -- "$ringpipe" train --layers 0
expect 2 "heads 5 does not divide --channels 32" -- "$ringpipe" train $tiny --heads 5 --out "$work/a"
expect 2 "no such file\|not found\|does not exist\|cannot" -- "$ringpipe" train $tiny --data "$work/missing" --out "$work/b"
expect 2 "unknown command" -- "$ringpipe" trian
# a truncated shard
"$ringpipe" train $tiny --steps 0 --out "$work/good" >/dev/null 2>&1
mkdir -p "$work/trunc"
cp "$work/good/data/val.bin" "$work/trunc/val.bin"
head -c 2000 "$work/good/data/train.bin" > "$work/trunc/train.bin"
expect 2 "truncated" -- "$ringpipe" train $tiny --data "$work/trunc" --out "$work/c"
# a checkpoint whose shapes do not match, a corrupt one, a missing one
"$ringpipe" train $tiny --out "$work/ck" >/dev/null 2>&1
expect 2 "channels" -- "$ringpipe" train $tiny --channels 64 --heads 2 --resume "$work/ck/ckpt" --out "$work/d"
cp -r "$work/ck/ckpt" "$work/corrupt"
printf 'garbage' | dd of="$work/corrupt/model.safetensors" bs=1 seek=3 conv=notrunc 2>/dev/null
expect 2 "safetensors" -- "$ringpipe" train $tiny --resume "$work/corrupt" --out "$work/e"
expect 2 "does not exist" -- "$ringpipe" train $tiny --resume "$work/nothing" --out "$work/f"
# an unwritable output directory (a path under a regular file)
touch "$work/file"
expect 2 "writable\|cannot create" -- "$ringpipe" train $tiny --out "$work/file/sub"
# MPI: a world size that is not a multiple of pp: every rank exits with status 2
expect 2 "not a multiple of --pp 2" -- mpirun -n 3 --oversubscribe --bind-to none "$ringpipe" train $tiny --pp 2 --out "$work/g"
expect 2 "--schedule\|interleaved\|m % p\|multiple" -- mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train $tiny --layers 4 --pp 2 --vpp 2 --microbatches 3 --schedule interleaved --out "$work/h"
# context parallel: T not divisible by 2P (zigzag), heads not divisible by P (Ulysses),
# a world size that is not dp x pp x cp
expect 2 "not divisible by 2 x --cp" -- mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train $tiny --seq 30 --cp 2 --out "$work/i"
expect 2 "heads 2 divisible by --cp 4" -- mpirun -n 4 --oversubscribe --bind-to none "$ringpipe" train $tiny --cp 4 --cp-impl ulysses --out "$work/j"
expect 2 "not a multiple of --pp 1 x --cp 2" -- mpirun -n 3 --oversubscribe --bind-to none "$ringpipe" train $tiny --cp 2 --out "$work/k"
expect 2 "cannot be combined with --schedule zb-h1" -- mpirun -n 2 --oversubscribe --bind-to none "$ringpipe" train $tiny --pp 2 --schedule zb-h1 --recompute full --out "$work/l"
# nothing was prepared or written for the runs that failed on their options
[ -e "$work/f/data" ] && { echo "FAIL: a failed --resume left $work/f/data behind"; fails=$((fails + 1)); }
echo "$fails failure(s)"
[ "$fails" = 0 ]
