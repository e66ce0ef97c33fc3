#!/bin/bash
# The bench scripts' shared front door (bench/common.sh), which no other test
# runs because the scripts themselves are experiments too slow for the suite:
#   - `--help` prints the script's own header (its usage and knobs), status 0;
#   - any other dash argument is refused with status 2 and the usage hint, not
#     taken as the output directory;
#   - the MPI scripts stop with status 2 and the fix when RINGPIPE is not a
#     built binary, before they make their output directory.
# usage: bench_scripts.sh SOURCE_ROOT WORKDIR
set -u
root=$1 work=$2
# shellcheck source=tests/cli_prelude.sh
. "$(dirname "$0")/../cli_prelude.sh"

# shellcheck disable=SC2016 # the line as the scripts have it, not expanded
scripts=$(grep -l '^\. "$(dirname "$0")/common.sh" "$@"' "$root"/bench/*.sh)
[ -n "$scripts" ] || { echo "FAIL: no bench script sources common.sh"; exit 1; }
for s in $scripts; do
  name=$(basename "$s")
  out=$(bash "$s" --help 2>&1)
  rc=$?
  # the header's first line, as the script's own second line has it
  first=$(sed -n '2s/^# \{0,1\}//p' "$s")
  [ "$rc" -eq 0 ] || bad "$name --help: status $rc"
  printf '%s\n' "$out" | grep -qF -- "$first" || bad "$name --help: its header's first line '$first' not printed"
  printf '%s\n' "$out" | grep -q '^set -\|^\. "' && bad "$name --help: printed code past the header"

  out=$(bash "$s" --bogus 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || bad "$name --bogus: status $rc, want 2"
  printf '%s\n' "$out" | grep -q "$name: unknown option --bogus.*--help" \
    || bad "$name --bogus: no message naming the option and --help: $out"
done

# the scripts that call bench_need_ringpipe
# shellcheck disable=SC2013 # the bench file names have no spaces
for s in $(grep -lx 'bench_need_ringpipe' "$root"/bench/*.sh); do
  name=$(basename "$s")
  out=$(RINGPIPE="$work/no_such_ringpipe" bash "$s" "$work/out_$name" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || bad "$name without ringpipe: status $rc, want 2"
  printf '%s\n' "$out" | grep -q "$name: no ringpipe binary at '$work/no_such_ringpipe'; build it (meson setup build && ninja -C build)" \
    || bad "$name without ringpipe: message: $out"
  [ -e "$work/out_$name" ] && bad "$name without ringpipe: made its output directory"
  checked=$((${checked:-0} + 1))
done
[ "${checked:-0}" -ge 4 ] || bad "only ${checked:-0} scripts call bench_need_ringpipe (want cp_longest_seq, dp_overlap, memory, pipeline_bubble)"

echo "$(echo "$scripts" | wc -w) scripts' --help and bad options, ${checked:-0} missing-binary stops checked"
finish bench_scripts
