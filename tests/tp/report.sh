#!/bin/sh
# The start-up memory table and the step's communication report are measured,
# not copied from the formulas: every row's measured activation bytes equal
# ringpipe's form within 1% (the layout rounds each view to 64 bytes), and the
# bytes the collectives sent in the last step equal the formula's, for tp 2
# with and without --sp, with full recomputation, and tp 2 x pp 2; and the run
# drew its layer (OUT/tp_layer.svg).
# usage: report.sh RINGPIPE WORKDIR
set -u
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 4 --channels 64 --heads 4 --seq 64 --batch 2 --steps 1 --eval-every 0
      --sample-tokens 0 --measure-peak=0 --threads 1"
fails=0
check() { # check NAME NP FLAGS...
  name=$1 np=$2
  shift 2
  out=$(timeout 60 mpirun -n "$np" --oversubscribe --bind-to none "$ringpipe" train $tiny \
          --out "$work/$name" "$@" 2>&1)
  verdict=$(printf '%s\n' "$out" | awk '
    function num_before_mib(x) { match(x, /[0-9.]+ MiB/); return substr(x, RSTART, RLENGTH) + 0 }
    / MiB [|] .* MiB .*[|] / { rows++; split($0, col, "|")
      m = num_before_mib(col[1]); o = num_before_mib(col[2])
      if (m - o > 0.01 * o || o - m > 0.01 * o || m <= 0) { print "row " $1 ": " m " vs " o; bad = 1 } }
    /^tensor parallel \(last step/ { seen = 1
      match($0, /[0-9.]+ MiB sent/); sent = substr($0, RSTART, RLENGTH) + 0
      match($0, /formula [0-9.]+/); want = substr($0, RSTART + 8, RLENGTH - 8) + 0
      if (sent != want || sent <= 0) { print "sent " sent " vs formula " want; bad = 1 } }
    END { if (rows != 5) print "memory rows: " rows + 0; if (!seen) print "no step report"
          if (bad || rows != 5 || !seen) exit 1 }')
  status=$?
  if ! grep -q "</svg>" "$work/$name/tp_layer.svg" 2>/dev/null; then
    verdict="$verdict no OUT/tp_layer.svg"
    status=1
  fi
  if [ $status -ne 0 ]; then
    echo "FAIL: $name: $verdict"; printf '%s\n' "$out" | tail -12; fails=$((fails + 1))
  else
    echo "ok: $name"
  fi
}
check tp2 2 --tp 2
check tp2_sp 2 --tp 2 --sp
check tp2_sp_full 2 --tp 2 --sp --recompute full
check tp2_pp2 4 --tp 2 --pp 2 --microbatches 2
echo "$fails failure(s)"
[ "$fails" = 0 ]
