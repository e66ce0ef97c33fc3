# Sourced by the trainer's shell tests: expect STATUS PATTERN -- command...
# runs the command and counts a failure in $fails unless it exits with STATUS
# and its output contains PATTERN.
expect() {
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
