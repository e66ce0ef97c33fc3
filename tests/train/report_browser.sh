#!/bin/sh
# `ringpipe report` in a real browser: headless Chromium loads the report of a
# pipelined pre-training run and of a GRPO run, runs the page's own check (every
# chart has points) and renders a PNG; the test fails on a console error, an
# empty chart or an empty picture. Chromium absent: skipped (exit 77), saying so.
# The check itself is checked: a page with an empty chart and one with a script
# error must both be caught.
set -u
ringpipe=$1 work=$2
shift 2
mpirun="$*"
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "skipped: no chromium on PATH (apt-get install chromium to run the browser check)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
fails=0
tiny="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --sample-tokens 0 --threads 1 --quiet"
# a browser profile of its own, no sandbox (root in CI), nothing from the network
run_browser() { # run_browser LOG ARGS...
  log=$1
  shift
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$work/profile" --enable-logging=stderr --v=0 "$@" 2>"$log"
}
page_check() { # page_check HTML NAME MIN_CHARTS -> 0 if the page passes
  dom=$(run_browser "$work/$2.log" --dump-dom "file://$1")
  body=$(printf '%s' "$dom" | grep -o '<body[^>]*>' | head -1)
  charts=$(printf '%s' "$body" | sed -n 's/.*data-charts="\([0-9]*\)".*/\1/p')
  if grep -q "CONSOLE.*\(Uncaught\|Error\)" "$work/$2.log"; then
    echo "$2: script error: $(grep CONSOLE "$work/$2.log" | head -1)"
    return 1
  fi
  case $body in *'data-check="ok"'*) ;; *) echo "$2: page check failed: $body"; return 1 ;; esac
  if [ "${charts:-0}" -lt "$3" ]; then
    echo "$2: $charts charts drawn, want at least $3"
    return 1
  fi
  echo "$2: $charts charts with data, no script errors"
}
$mpirun -n 2 "$ringpipe" train --pp 2 --microbatches 4 $tiny --steps 12 --eval-every 4 --out "$work/pp" >/dev/null 2>&1 ||
  { echo "FAIL: the pipelined run failed"; exit 1; }
"$ringpipe" grpo --steps 3 --eval-every 1 --threads 1 --quiet --out "$work/grpo" >/dev/null 2>&1 ||
  { echo "FAIL: the GRPO run failed"; exit 1; }
for r in pp grpo; do
  out=$("$ringpipe" report "$work/$r" --out "$work/$r.html") || { echo "FAIL: report $r: $out"; fails=$((fails + 1)); }
done
grep -q "<svg" "$work/pp.html" && grep -q "measured (last step)" "$work/pp.html" ||
  { echo "FAIL: the pipelined report has no timeline"; fails=$((fails + 1)); }
if grep -o 'https\?://[^" ]*' "$work/pp.html" "$work/grpo.html" | grep -v 'www.w3.org/2000/svg' | grep -q .; then
  echo "FAIL: the report refers to the network"; fails=$((fails + 1))
fi
page_check "$work/pp.html" pp 6 || fails=$((fails + 1))
page_check "$work/grpo.html" grpo 4 || fails=$((fails + 1))
run_browser "$work/shot.log" --hide-scrollbars --window-size=1280,2400 --screenshot="$work/pp.png" "file://$work/pp.html" >/dev/null
size=$(wc -c <"$work/pp.png" 2>/dev/null || echo 0)
if [ "$size" -lt 20000 ]; then
  echo "FAIL: the screenshot $work/pp.png has $size bytes"; fails=$((fails + 1))
else
  echo "rendered $work/pp.png ($size bytes)"
fi
# the check can fail: an emptied chart, a script error
sed 's/points="[^"]*"/points=""/' "$work/pp.html" >"$work/empty.html"
sed 's|<script>|<script>no_such_function();</script><script>|' "$work/pp.html" >"$work/broken.html"
if page_check "$work/empty.html" empty 1 >/dev/null; then echo "FAIL: an empty chart passed"; fails=$((fails + 1)); fi
if page_check "$work/broken.html" broken 1 >/dev/null; then echo "FAIL: a script error passed"; fails=$((fails + 1)); fi
echo "$fails failure(s)"
[ "$fails" = 0 ]
