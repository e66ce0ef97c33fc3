#!/usr/bin/env bash
# Longest trainable sequence with context parallelism (issue 5): for cp = 1, 2, 4,
# the largest --seq whose one training step stays within a per-rank memory budget,
# as measured by the arena ("total peak" of the "peak memory (rank 0)" line).
# The search doubles T until a run exceeds the budget (or, with PREDICT=1, until
# the line through the last two fits puts the next doubling well over it), then
# refines: total peak is affine in T for a fixed cp, so it interpolates (in steps
# of GRAN) and stops when a fitting run and a run over the budget are GRAN apart.
# Every reported point is a real run. A second table: training tokens/s at one T
# for cp = 1 and cp = 2 (ring vs ulysses, zigzag vs contiguous), medians of
# REPEATS interleaved runs. Writes markdown to stdout and OUT_DIR/cp_longest_seq.md.
#
# usage: bench/cp_longest_seq.sh [OUT_DIR]        (default bench/results)
#
# Environment knobs (defaults in brackets):
#   RINGPIPE    the ringpipe binary [build/ringpipe]
#   MODEL       model flags ["--layers 2 --channels 128 --heads 4 --batch 1 --attention flash"]
#   BUDGET_MIB  per-rank budget on the arena's total peak [256]
#   CPS         context-parallel sizes ["1 2 4"]
#   CP_IMPL     attention for the search: ring or ulysses [ring]
#   T0          first --seq tried [1024]
#   PREDICT     1: stop doubling when the line through the last two fits puts the
#               doubled T over 1.1 x the budget (saves the costliest runs); 0: double
#               until a run is over [1]
#   GRAN        resolution of the answer; a multiple of 2 x max cp [256]
#   THREADS     compute threads per rank in the search; 0: the trainer's default (the
#               cores divided among the local ranks). Per-thread scratch is well under
#               1 MiB here, so the memory answer does not depend on it [0]
#   TPUT_SEQ    --seq of the tokens/s table; empty: skip the table [2048]
#   TPUT_STEPS  steps per tokens/s run (the first is dropped) [5]
#   REPEATS     runs per tokens/s configuration [3]
#   MPIRUN      launcher [mpirun]
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
MODEL=${MODEL:---layers 2 --channels 128 --heads 4 --batch 1 --attention flash}
BUDGET_MIB=${BUDGET_MIB:-256}
CPS=${CPS:-1 2 4}
CP_IMPL=${CP_IMPL:-ring}
T0=${T0:-1024}
PREDICT=${PREDICT:-1}
GRAN=${GRAN:-256}
THREADS=${THREADS:-0}
TPUT_SEQ=${TPUT_SEQ-2048}
TPUT_STEPS=${TPUT_STEPS:-5}
REPEATS=${REPEATS:-3}
MPIRUN=${MPIRUN:-mpirun}

bench_need_ringpipe
bench_mpi_as_root
bench_out_dir
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r -a model <<<"$MODEL"
quiet=(--eval-every 0 --eval-batches 1 --sample-tokens 0 --measure-peak=0 --quiet)
points="$work/points.tsv"   # cp T peak_MiB fits seconds detail
: >"$points"

# peak CP T: one training step at --seq T; prints rank 0's total peak in MiB and
# the whole peak line, or "fail" and the run's error line when the run itself
# fails (its log then goes to stderr)
peak() {
  local cp=$1 T=$2 tag="search_cp$1_T$2"
  local cmd=("$RINGPIPE" train "${model[@]}" --seq "$T" --cp "$cp" --cp-impl "$CP_IMPL"
             --threads "$THREADS" --steps 1 --stop-after 1 "${quiet[@]}" --out "$work/$tag")
  [ "$cp" -gt 1 ] && cmd=("$MPIRUN" -n "$cp" --oversubscribe --bind-to none "${cmd[@]}")
  echo "cp_longest_seq.sh: ${cmd[*]}" >&2
  if ! "${cmd[@]}" >"$work/$tag.log" 2>&1; then
    echo "cp_longest_seq.sh: run cp=$cp T=$T failed; its log:" >&2
    cat "$work/$tag.log" >&2
    printf 'fail\t%s\n' "$(grep -m1 'error' "$work/$tag.log" | sed 's/.*error: //')"
    return
  fi
  local line
  line=$(sed -n 's/^peak memory (rank 0): //p' "$work/$tag.log" | tail -1)
  printf '%s\t%s\n' "$(sed -n 's/.*total peak \([0-9.]*\) MiB.*/\1/p' <<<"$line")" "$line"
}

# probe CP T: run it, record the point, succeed when it fits the budget
probe() {
  local out p detail fits t0
  t0=$(date +%s.%N)
  out=$(peak "$1" "$2")
  p=${out%%$'\t'*}
  detail=${out#*$'\t'}
  [ -n "$p" ] || p=fail
  fits=$(awk -v p="$p" -v b="$BUDGET_MIB" 'BEGIN { print (p != "fail" && p + 0 <= b) ? 1 : 0 }')
  printf '%s\t%s\t%s\t%s\t%.1f\t%s\n' "$1" "$2" "$p" "$fits" \
    "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$detail" >>"$points"
  echo "cp_longest_seq.sh: cp=$1 T=$2 total peak $p MiB (fits: $fits)" >&2
  [ "$fits" = 1 ]
}

# guess CP HI AT: from the measured points of CP, with HI the smallest T over the
# budget (0: none), print the next T to probe; with AT > 0 instead print "over"
# when the line predicts T = AT over 1.1 x the budget, else "fits".
# The line: through the largest fit and HI when HI ran, else the two largest fits.
guess() {
  awk -F'\t' -v c="$1" -v hi="$2" -v at="$3" -v b="$BUDGET_MIB" -v g="$GRAN" '
    $1 == c && $4 == 1 { if ($2 > t1) { t2 = t1; p2 = p1; t1 = $2; p1 = $3 }
                         else if ($2 > t2) { t2 = $2; p2 = $3 } }
    $1 == c && $2 == hi && $3 != "fail" { th = $2; ph = $3 }
    END {
      if (th) { t2 = th; p2 = ph }
      slope = (t2 && t2 != t1) ? (p2 - p1) / (t2 - t1) : 0
      if (at > 0) { print (slope > 0 && p1 + slope * (at - t1) > 1.1 * b) ? "over" : "fits"; exit }
      t = slope > 0 ? t1 + (b - p1) / slope : (hi ? (t1 + hi) / 2 : 2 * t1)
      t = int(t / g) * g
      if (t <= t1) t = t1 + g
      if (hi && t >= hi) t = hi - g
      print t
    }' "$points"
}

start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for cp in $CPS; do
  if [ $((GRAN % (2 * cp))) != 0 ]; then
    echo "cp_longest_seq.sh: GRAN=$GRAN is not a multiple of 2 x cp = $((2 * cp))" >&2
    exit 2
  fi
  lo=0
  hi=0   # the smallest T known to be over the budget; 0: none yet
  T=$T0
  while :; do
    if probe "$cp" "$T"; then lo=$T; else hi=$T; break; fi
    # with PREDICT, skip a doubling the line through the last two fits puts well
    # over the budget: the refinement below still brackets the answer with runs
    if [ "$PREDICT" = 1 ] && [ "$(guess "$cp" 0 $((2 * T)))" = over ]; then break; fi
    T=$((T * 2))
  done
  if [ "$lo" = 0 ]; then
    echo "cp_longest_seq.sh: cp=$cp does not fit $BUDGET_MIB MiB even at T=$T0; lower T0" >&2
    continue
  fi
  # until a fit and a miss GRAN apart: the next T from the line through lo and hi
  # (or the last two fits), in multiples of GRAN, kept strictly between them
  while [ "$hi" = 0 ] || [ $((hi - lo)) -gt "$GRAN" ]; do
    T=$(guess "$cp" "$hi" 0)
    if probe "$cp" "$T"; then lo=$T; else hi=$T; fi
  done
done
search_end=$(date +%s)

# tokens/s at one T: cp = 1 uses every core, cp = 2 one thread per rank on each
tput="$work/tput.tsv"   # label metrics
: >"$tput"
if [ -n "$TPUT_SEQ" ]; then
  configs=("1 ring zigzag" "2 ring zigzag" "2 ring contiguous" "2 ulysses zigzag"
           "2 ulysses contiguous")
  for rep in $(seq 1 "$REPEATS"); do
    for c in "${configs[@]}"; do
      read -r cp impl layout <<<"$c"
      tag="tput_cp${cp}_${impl}_${layout}_r$rep"
      cmd=("$RINGPIPE" train "${model[@]}" --seq "$TPUT_SEQ" --cp "$cp" --cp-impl "$impl"
           --cp-layout "$layout" --steps "$TPUT_STEPS" "${quiet[@]}" --out "$work/$tag")
      [ "$cp" -gt 1 ] && cmd=("$MPIRUN" -n "$cp" --oversubscribe --bind-to none "${cmd[@]}")
      echo "cp_longest_seq.sh: ${cmd[*]}" >&2
      if ! "${cmd[@]}" >"$work/$tag.log" 2>&1; then
        echo "cp_longest_seq.sh: run $tag failed; its log:" >&2
        cat "$work/$tag.log" >&2
        exit 1
      fi
      printf '%s\t%s\n' "$c" "$work/$tag/metrics.jsonl" >>"$tput"
    done
  done
fi
end=$(date +%s)
load1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$points" "$tput" "$MODEL" "$BUDGET_MIB" "$CP_IMPL" "$THREADS" "$GRAN" "$TPUT_SEQ" \
  "$TPUT_STEPS" "$REPEATS" "$((search_end - start))" "$((end - search_end))" "$load0" "$load1" \
  >"$OUT/cp_longest_seq.md" <<'EOF'
import json, sys, statistics, datetime, platform, os

(points, tput, model, budget, impl, threads, gran, tseq, tsteps, repeats, s_secs, t_secs,
 load0, load1) = sys.argv[1:15]
budget = float(budget)
pts, detail, fails = {}, {}, []
for line in open(points):
    cp, T, p, fits, secs, det = line.rstrip("\n").split("\t")
    pts.setdefault(int(cp), []).append((int(T), p, fits == "1", float(secs)))
    detail[(int(cp), int(T))] = det
    if p == "fail":
        fails.append(f"cp {cp}, T {T}: {det}")
now = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
print("# Longest trainable sequence per context-parallel size\n")
print(f"date: {now}, host {platform.node()}, {os.cpu_count()} cores, load average {load0} at "
      f"start, {load1} at the end; model `{model}`, --cp-impl {impl}, --cp-layout zigzag, "
      f"{threads} thread(s) per rank, one step per run (--steps 1 --stop-after 1); budget "
      f"{budget:g} MiB of arena total peak per rank (rank 0), resolution {gran} tokens; "
      f"search took {s_secs} s\n")
print("| cp | longest T within budget | its total peak MiB | first T over | its total peak MiB "
      "| T / T(cp=1) | runs |")
print("|---:|---:|---:|---:|---:|---:|---:|")
base = None
for cp in sorted(pts):
    fit = [x for x in pts[cp] if x[2]]
    miss = [x for x in pts[cp] if not x[2]]
    if not fit:
        print(f"| {cp} | none | | | | | {len(pts[cp])} |")
        continue
    best = max(fit)
    over = min(miss) if miss else (0, "", False, 0)
    if base is None and cp == 1:
        base = best[0]
    rel = f"{best[0] / base:.2f}" if base else "n/a"
    print(f"| {cp} | {best[0]} | {best[1]} | {over[0] or ''} | {over[1]} | {rel} | "
          f"{len(pts[cp])} |")
print("\nWhere the memory goes at the longest T (rank 0, arena peaks):\n")
for cp in sorted(pts):
    fit = [x for x in pts[cp] if x[2]]
    if fit:
        print(f"- cp {cp}, T {max(fit)[0]}: {detail[(cp, max(fit)[0])]}")
print("\nEvery measured point (T: total peak MiB, run seconds):\n")
for cp in sorted(pts):
    print(f"- cp {cp}: " + ", ".join(f"{T}: {p} ({s:.0f} s)" for T, p, _, s in sorted(pts[cp])))
if fails:
    print("\nRuns that failed (counted as over the budget):\n")
    for f in fails:
        print(f"- {f}")

rows = {}
for line in open(tput):
    label, path = line.rstrip("\n").split("\t")
    v = [r["tokens_per_s"] for r in map(json.loads, open(path)) if "tokens_per_s" in r][1:]
    rows.setdefault(label, []).extend(v)
if rows:
    print(f"\n## Training tokens/s at T = {tseq}\n")
    print(f"Median over {repeats} interleaved runs x {int(tsteps) - 1} steps (first step of "
          f"each run dropped); cp = 1 runs one rank with every core's thread, cp = 2 two "
          f"ranks with one thread each; took {t_secs} s.\n")
    print("| cp | impl | layout | tokens/s (median) | min | max | vs cp=1 |")
    print("|---:|---|---|---:|---:|---:|---:|")
    ref = statistics.median(rows.get("1 ring zigzag", [float("nan")]))
    for label, v in rows.items():
        cp, impl_, layout = label.split()
        m = statistics.median(v)
        print(f"| {cp} | {impl_ if cp != '1' else '-'} | {layout if cp != '1' else '-'} | "
              f"{m:.0f} | {min(v):.0f} | {max(v):.0f} | {m / ref:.2f} |")
EOF
cat "$OUT/cp_longest_seq.md"
