# shellcheck shell=sh
# Sourced by the command-line shell tests once they have set $work: a fresh
# work directory, the failure count, bad MESSAGE that counts one, and
# finish NAME, the last command: "NAME: ok" and status 0 when nothing failed.
rm -rf "${work:?set work before sourcing cli_prelude.sh}"
mkdir -p "$work"
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
finish() {
  [ "$fails" -eq 0 ] && echo "$1: ok"
  [ "$fails" -eq 0 ]
}
