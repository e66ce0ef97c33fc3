#!/bin/sh
# Builds the libFuzzer harnesses (clang, ASan + UBSan) and runs each for a while.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default 180 s, all targets)
#
# Each target starts from a scratch copy of its committed corpus
# (tests/fuzz/corpus/<target>) in $FUZZ_WORK (default /tmp/ringpipe-fuzz), so
# the fuzzer's new inputs do not land in the source tree. Crashes are written
# there as crash-*/leak-*/timeout-*; copy the ones you fix into the corpus
# (as crash-<what>) so the default suite's fuzz_replay_* tests keep them fixed.
# Prints, per target, the inputs executed and the crashes found.
set -u
secs=${1:-180}
[ $# -gt 0 ] && shift
targets=${*:-shard safetensors json config schedule bpe hf_config}
src=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$src/build-fuzz}
work=${FUZZ_WORK:-/tmp/ringpipe-fuzz}
if [ ! -d "$build" ]; then
  CC=clang meson setup "$build" "$src" -Dfuzz=true -Db_sanitize=address,undefined \
    -Db_lundef=false --buildtype=debugoptimized >/dev/null || exit 1
fi
for t in $targets; do ninja -C "$build" "tests/fuzz/fuzz_$t" >/dev/null || exit 1; done
# UBSan reports must stop the run like ASan's do; leaks of Open MPI do not
# occur here (the harnesses never initialise MPI).
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
status=0
for t in $targets; do
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp "$src/tests/fuzz/corpus/$t/"* "$work/$t/corpus/"
  log="$work/$t/fuzz.log"
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -artifact_prefix="$work/$t/artifacts/" "$work/$t/corpus" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -1 | grep -o '[0-9]*')
  crashes=$(ls "$work/$t/artifacts" | wc -l)
  echo "$t: ${runs:-?} inputs executed in ${secs} s, exit $rc, $crashes crash/leak/timeout file(s) in $work/$t/artifacts"
  [ "$rc" = 0 ] && [ "$crashes" = 0 ] || status=1
done
exit $status
