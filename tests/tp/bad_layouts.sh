#!/bin/sh
# Layouts tensor parallelism cannot take: heads or padded vocabulary rows not
# divisible by --tp, a world size that is not dp x pp x cp x tp, Ulysses
# heads per tp rank not divisible by --cp, --sp without --tp, with a --seq
# that --tp does not divide or with a schedule that splits backward (the options are checked before the
# grid, on any world size). Every rank exits with status 2 (each rank's status is
# printed by a wrapper, so one rank's 2 cannot hide another's hang or crash:
# the whole launch runs under a timeout), and the message is printed once.
# usage: bad_layouts.sh RINGPIPE WORKDIR
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 2 --channels 32 --heads 4 --seq 32 --batch 2 --steps 2 --eval-every 0
      --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
fails=0
# refused NP PATTERN ARGS...: every one of NP ranks exits 2, PATTERN printed once
refused() {
  np=$1 pat=$2
  shift 2
  out=$(timeout 60 mpirun -n "$np" --oversubscribe --bind-to none \
          sh -c '"$0" "$@"; echo "rank exit $?"' "$ringpipe" "$@" 2>&1)
  twos=$(printf '%s\n' "$out" | grep -c "^rank exit 2$")
  said=$(printf '%s\n' "$out" | grep -c -- "$pat")
  if [ "$twos" != "$np" ] || [ "$said" != 1 ]; then
    echo "FAIL: $* -> $twos of $np ranks exited 2, message seen $said times:"
    printf '%s\n' "$out" | tail -6
    fails=$((fails + 1))
  else
    echo "ok: $np ranks exit 2, '$pat'"
  fi
}
refused 2 "--tp 2 does not divide --heads 3" train $tiny --channels 48 --heads 3 --tp 2 --out "$work/a"
refused 3 "--tp 3 does not divide the padded vocabulary 256" \
  train $tiny --channels 48 --heads 3 --tp 3 --out "$work/b"
refused 3 "world size 3 is not a multiple of --pp 1 x --cp 1 x --tp 2" train $tiny --tp 2 --out "$work/c"
refused 4 "world size 4 is not a multiple of --pp 2 x --cp 1 x --tp 4" train $tiny --tp 4 --pp 2 --out "$work/d"
refused 2 "splits each tensor-parallel rank's 2 heads" \
  train $tiny --tp 2 --cp 4 --cp-impl ulysses --out "$work/e"
refused 2 "--sp splits each rank's 30 positions (--seq 30 / --cp 1) over --tp 4" \
  train $tiny --seq 30 --tp 4 --sp --out "$work/f"
refused 2 "--sp shards what tensor parallelism replicates" train $tiny --sp --out "$work/g"
refused 4 "--sp cannot be combined with --schedule zb-h1" \
  train $tiny --tp 2 --sp --pp 2 --schedule zb-h1 --out "$work/h"
for p in a b c d e f g h; do
  [ -e "$work/$p" ] && { echo "FAIL: a refused run left $work/$p behind"; fails=$((fails + 1)); }
done
echo "$fails failure(s)"
[ "$fails" = 0 ]
