#!/bin/sh
# `ringpipe bench attention` end to end on small T: every (T, causal) row is
# printed, flash and naive outputs agree, the targets line names the lowest
# FMA fraction and the row it comes from (issue #16's target holds at every T,
# so the best row alone would overstate it), the probe on all threads at once
# is set beside it, --cold 1 runs and says so, and bad input is status 2.
# usage: bench_attention_cli.sh RINGPIPE WORKDIR
set -eu
ringpipe=$1 work=$2
# shellcheck source=tests/cli_prelude.sh
. "$(dirname "$0")/../cli_prelude.sh"

"$ringpipe" bench attention --tmin 64 --tmax 128 --threads 1 --min-seconds 0 \
  --naive-max-gib 1 >"$work/out" 2>"$work/err" || bad "bench attention: status $? ($(cat "$work/err"))"
cat "$work/out"
# the rows: T, causal, ..., the FMA fraction in field 19 (after 8 '|' fields)
awk '$1 ~ /^[0-9]+$/ && ($2 == "yes" || $2 == "no") { print $1, $2, $19 }' "$work/out" >"$work/rows"
for want in "64 yes" "64 no" "128 yes" "128 no"; do
  grep -q "^$want " "$work/rows" || bad "no row for T causal = $want"
done
diff=$(sed -n 's/^max |out flash - out naive| over the runs: //p' "$work/out")
awk -v d="${diff:-x}" 'BEGIN { exit !(d + 0 == d && d < 1e-4) }' || bad "flash vs naive differ by '$diff'"
# the lowest FMA fraction and its row, as the targets line must name them (any
# row printed with that value: two rows may round alike)
low=$(sort -g -k3 "$work/rows" | head -1 | awk '{ print $3 }')
named=$(grep '^targets:' "$work/out" | sed -n 's/.*(lowest \([^;]*\);.*/\1/p')
found=0
while read -r t causal fma; do
  [ "$fma" = "$low" ] || continue
  want="$low at T=$t"
  [ "$causal" = yes ] && want="$want causal"
  [ "$named" = "$want" ] && found=1
done <"$work/rows"
[ "$found" -eq 1 ] || bad "targets line names '$named', not a row at the lowest FMA fraction $low"

# the probe on all threads at once: where there is an FMA probe (not under the
# scalar ceiling) a line after the targets gives its rate's share of the FMA
# peak and the best f+b fraction over it, which is the targets line's over that
# share (to the rounding of 3 decimals)
best=$(grep '^targets:' "$work/out" | sed -n 's/.*of FMA peak \([0-9.]*\) (lowest.*/\1/p')
all=$(grep '^FMA probe on all' "$work/out" || true)
if awk -v b="${best:-0}" 'BEGIN { exit !(b > 0) }'; then
  [ -n "$all" ] || bad "no 'FMA probe on all threads at once' line beside an FMA fraction of $best"
  share=$(echo "$all" | sed -n 's/.* GFLOP\/s, \([0-9.]*\) of the FMA peak;.*/\1/p')
  over=$(echo "$all" | sed -n 's/.*f+b over it: best \([0-9.]*\),.*/\1/p')
  awk -v b="$best" -v s="${share:-0}" -v o="${over:-0}" \
    'BEGIN { exit !(s > 0 && o > 0 && (b / s - o) ^ 2 <= (0.002 + 0.002 * o / s) ^ 2) }' ||
    bad "all-threads line: best $best over share '$share' is not '$over': $all"
else
  [ -z "$all" ] || bad "an all-threads line without an FMA probe: $all"
fi

# --cold 1: the header says the caches are evicted, and the rows still come
grep -q '^caches: warm' "$work/out" || bad "the warm run's header does not say its caches are warm"
"$ringpipe" bench attention --tmin 64 --tmax 64 --causal yes --threads 1 --min-seconds 0 \
  --cold 1 >"$work/cold" 2>"$work/err" || bad "bench attention --cold 1: status $? ($(cat "$work/err"))"
grep -q '^caches: cold' "$work/cold" || bad "--cold 1: no 'caches: cold' line"
grep -Eq '^ +64 +yes \|' "$work/cold" || bad "--cold 1: no row for T = 64 causal"

# bad_input OPTION VALUE WANT: status 2, and the message quotes WANT (the bad value)
bad_input() {
  set +e
  "$ringpipe" bench attention "$1" "$2" >"$work/bad_out" 2>"$work/bad_err"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || bad "$1 $2: status $rc, want 2"
  grep -q -- "$3" "$work/bad_err" || bad "$1 $2: the message does not give the bad value: $(cat "$work/bad_err")"
}
bad_input --cold 2 "--cold 2;"
bad_input --tmin 0 "--tmin 0 "

finish bench_attention_cli
