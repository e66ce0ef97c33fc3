#!/bin/sh
# Faults, nothing lost: the comm watchdog ends a hung job with a message; stale
# temporaries of dead processes are reclaimed (live ones kept); a bad output
# path fails before anything is created; an error all ranks agree on is one
# message and status 2; a checkpoint with NaN state is refused; a run that
# diverges stops with status 4 and leaves the last checkpoint as it was;
# --keep-ckpts and --resume auto; metrics.jsonl holds each step once after a
# resume from an earlier checkpoint.
# usage: faults.sh RINGPIPE WORKDIR
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
mpi="mpirun -n 2 --oversubscribe --bind-to none"
tiny="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --microbatches 2 --warmup 2
      --eval-every 0 --sample-tokens 0 --measure-peak=0 --threads 1 --quiet"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
section() { before=$fails; }
passed() { [ $fails = $before ] && ok "$*"; }
"$ringpipe" train $tiny --steps 0 --out "$work/prep" >/dev/null || exit 1
data="--data $work/prep/data"

# ---- watchdog: rank 1 hangs at step 3; rank 0 names what it waits for
for layout in "--pp 2" "--microbatches 1"; do
  out=$(RINGPIPE_TEST_HANG=1:3 timeout 60 $mpi "$ringpipe" train $tiny $data $layout \
        --comm-timeout 1 --steps 6 --out "$work/hang" 2>&1)
  rc=$?
  if [ $rc = 0 ] || [ $rc = 124 ]; then
    fail "watchdog ($layout): status $rc (want non-zero, no timeout)"
  elif ! printf '%s' "$out" | grep -q "no progress for .* waiting on .* rank.* at step 3"; then
    fail "watchdog ($layout): no message naming action, peer and step"; printf '%s\n' "$out" | tail -5
  else
    ok "watchdog ($layout): $(printf '%s' "$out" | grep -o 'waiting on [^:]*')"
  fi
done

# ---- stale temporaries: those of a dead process go, a live one's stay
"$ringpipe" train $tiny $data --steps 2 --out "$work/stale" >/dev/null || fail "stale: base run"
section
mkdir -p "$work/stale/data"
sh -c 'exit 0' &
dead=$!
wait $dead
live=$$
mkdir -p "$work/stale/ckpt.tmp-$dead" "$work/stale/ckpt.tmp-$live" "$work/stale/ckpt.old-$dead"
for d in "ckpt.tmp-$dead" "ckpt.tmp-$live" "ckpt.old-$dead"; do
  head -c 4096 /dev/zero >"$work/stale/$d/model.safetensors"
done
touch "$work/stale/ckpt/meta.json.tmp-$dead" "$work/stale/data/train.bin.tmp-$dead" \
      "$work/stale/metrics.jsonl.tmp-$dead"
out=$("$ringpipe" train $tiny $data --steps 3 --resume "$work/stale/ckpt" --out "$work/stale" 2>&1) ||
  fail "stale: resumed run failed: $out"
left=$(cd "$work/stale" && find . -name "*-$dead")
[ -z "$left" ] || fail "stale: temporaries of dead process $dead left: $left"
[ -d "$work/stale/ckpt.tmp-$live" ] || fail "stale: the live process's ckpt.tmp-$live was removed"
printf '%s' "$out" | grep -q "removed 5 stale temporaries" || fail "stale: no 'removed 5' line: $out"
passed "stale temporaries of pid $dead reclaimed, pid $live's kept"

# ---- output paths are checked before anything is created
touch "$work/file"
expect2() { # expect2 WHAT PATTERN NOT_CREATED -- command...
  what=$1 pat=$2 absent=$3
  shift 4
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc != 2 ] || ! printf '%s' "$out" | grep -q -- "$pat"; then
    fail "$what: status $rc (want 2) or no '$pat': $(printf '%s' "$out" | tail -3)"
  elif [ -e "$absent" ]; then
    fail "$what: $absent was created for a run with bad options"
  else
    ok "$what: status 2, '$pat', nothing created"
  fi
}
expect2 "unwritable --trace" "--trace" "$work/t1" -- \
  "$ringpipe" train $tiny $data --steps 2 --trace "$work/file/trace.json" --out "$work/t1"
expect2 "--data missing" "does not exist\|no such\|cannot" "$work/t2" -- \
  "$ringpipe" train $tiny --data "$work/nothing" --out "$work/t2"
expect2 "--out under a file" "--out" "$work/file/sub" -- \
  "$ringpipe" train $tiny $data --out "$work/file/sub"

# ---- an error every rank agrees on (a save that cannot go where it should):
# one message, status 2, no fatal lines
mkdir -p "$work/agreed/ckpt" && touch "$work/agreed/ckpt/notes.txt"
out=$($mpi "$ringpipe" train $tiny $data --pp 2 --steps 4 --ckpt-every 2 --out "$work/agreed" 2>&1)
rc=$?
n=$(printf '%s\n' "$out" | grep -c "error:")
if [ $rc != 2 ] || [ "$n" != 1 ] || printf '%s' "$out" | grep -q fatal; then
  fail "agreed save error: status $rc (want 2), $n error lines (want 1): $(printf '%s' "$out" | head -5)"
else
  ok "agreed save error under mpirun: status 2, one message"
fi

# ---- non-finite state
# poke FILE BYTES: the first 64 floats of the file's tensor data become BYTES
poke() {
  hdr=$(od -An -t u8 -N8 "$1" | tr -d ' ')
  i=0
  while [ $i -lt 64 ]; do printf "$2"; i=$((i + 1)); done |
    dd of="$1" bs=1 seek=$((8 + hdr)) conv=notrunc 2>/dev/null
}
"$ringpipe" train $tiny $data --steps 2 --out "$work/nan" >/dev/null || fail "nan: base run"
cp -r "$work/nan/ckpt" "$work/nanw"
poke "$work/nanw/model.safetensors" '\000\000\300\177'       # NaN weights
cp -r "$work/nan/ckpt" "$work/nanv"
poke "$work/nanv/optim.safetensors" '\000\000\300\177'       # NaN AdamW state
for c in nanw nanv; do
  section
  sum=$(md5sum "$work/$c"/*)
  out=$("$ringpipe" train $tiny $data --steps 4 --resume "$work/$c" --out "$work/$c.run" 2>&1)
  rc=$?
  [ $rc = 2 ] && printf '%s' "$out" | grep -q "non-finite" ||
    fail "$c: status $rc (want 2) or no 'non-finite': $out"
  [ "$sum" = "$(md5sum "$work/$c"/*)" ] || fail "$c: the checkpoint changed"
  [ -e "$work/$c.run" ] && fail "$c: --out was created for a run that could not start"
  passed "$c: refused at resume with status 2, checkpoint unchanged"
done
# huge but finite weights: the loss is not finite at the next step
cp -r "$work/nan/ckpt" "$work/huge"
poke "$work/huge/model.safetensors" '\231\166\226\176'       # 1e38
for launch in "" "$mpi"; do
  rm -rf "$work/huge.run"
  mkdir -p "$work/huge.run" && cp -r "$work/huge" "$work/huge.run/ckpt"
  sum=$(md5sum "$work/huge.run/ckpt"/*)
  out=$($launch "$ringpipe" train $tiny $data --steps 4 --resume "$work/huge.run/ckpt" \
        --out "$work/huge.run" 2>&1)
  rc=$?
  n=$(printf '%s\n' "$out" | grep -c "diverged")
  if [ $rc != 4 ] || [ "$n" != 1 ]; then
    fail "divergence (${launch:-1 rank}): status $rc (want 4), $n messages: $out"
  elif [ "$sum" != "$(md5sum "$work/huge.run/ckpt"/*)" ]; then
    fail "divergence (${launch:-1 rank}): the last good checkpoint was overwritten"
  elif grep -qi "nan\|inf" "$work/huge.run/metrics.jsonl"; then
    fail "divergence (${launch:-1 rank}): metrics.jsonl holds a non-finite value"
  else
    ok "divergence (${launch:-1 rank}): status 4, one message, checkpoint untouched"
  fi
done

# ---- --keep-ckpts and --resume auto
section
k="$work/keep"
"$ringpipe" train $tiny $data --steps 6 --ckpt-every 2 --keep-ckpts 2 --out "$k" >/dev/null ||
  fail "keep: run"
have=$(cd "$k" && ls -d ckpt-* | tr '\n' ' ')
[ "$have" = "ckpt-000004 ckpt-000006 " ] || fail "keep 2: have '$have' (want ckpt-000004 ckpt-000006)"
[ "$(readlink "$k/ckpt")" = "ckpt-000006" ] || fail "keep: ckpt -> '$(readlink "$k/ckpt")'"
out=$("$ringpipe" train $tiny $data --steps 8 --keep-ckpts 2 --resume auto --out "$k" 2>&1)
printf '%s' "$out" | grep -q "resuming from $k/ckpt (step 6" || fail "auto: $out"
rm "$k/ckpt-000008/meta.json"            # the newest is incomplete: auto skips it
out=$("$ringpipe" train $tiny $data --steps 8 --keep-ckpts 2 --resume auto --out "$k" 2>&1)
printf '%s' "$out" | grep -q "resuming from $k/ckpt-000006 (step 6" ||
  fail "auto past an incomplete checkpoint: $out"
out=$("$ringpipe" train $tiny $data --steps 1 --resume auto --out "$work/fresh" 2>&1)
printf '%s' "$out" | grep -q "no complete checkpoint.*starting fresh" || fail "auto, none: $out"
passed "keep-ckpts 2 and --resume auto"

# ---- metrics.jsonl after a resume from an earlier checkpoint: every step once
section
m="$work/metrics"
"$ringpipe" train $tiny $data --steps 8 --ckpt-every 3 --keep-ckpts 5 --out "$m" >/dev/null
"$ringpipe" train $tiny $data --steps 8 --keep-ckpts 5 --resume "$m/ckpt-000003" --out "$m" \
  >/dev/null || fail "metrics: resume failed"
steps=$(sed -n 's/^{"step":\([0-9]*\),"loss".*/\1/p' "$m/metrics.jsonl" | tr '\n' ' ')
[ "$steps" = "1 2 3 4 5 6 7 8 " ] || fail "metrics after resume from step 3: steps '$steps'"
[ -z "$(ls "$m" | grep tmp)" ] || fail "metrics: a temporary is left"
passed "metrics.jsonl holds steps 1..8 once"

echo "$fails failure(s)"
[ "$fails" = 0 ]
