#!/usr/bin/env bash
# Pipeline bubble experiment (issues 4 and 14): every schedule (GPipe, 1F1B,
# interleaved v = 2, ZB-H1, ZB-H2, ZB-V, V-Half, V-Min, DualPipeV) at pp = 4 for
# m in {4, 8, 16} in emulated-compute mode (actions sleep, messages are real),
# with tF = tI = tW (COSTS) and again with the cost ratio a real run measured on
# this machine (COSTS_MEASURED), and the loop schedules at pp = 2 with real
# compute where the machine has the cores. Each run's last step is measured
# against the simulator's prediction from the same (measured) per-action costs;
# for each (costs, m) the advisor (ringpipe sim --advise) is asked too, with no
# memory limit and with 1F1B's activation memory as the limit, and its choices
# are marked in the table. The table and plot come from tools/plot_bubble.py.
#
# usage: bench/pipeline_bubble.sh [OUT_DIR]        (default bench/results)
#
# Environment knobs (defaults in brackets):
#   RINGPIPE    the ringpipe binary [build/ringpipe]
#   COSTS       emulated tF,tB,tW in ms, per rank [40,80,40]: tI = tB - tW, so
#               40,80,40 gives tF = tI = tW, the setting of ZB-H1's 1/3 claim; late
#               wake-ups cost a few ms, so shorter actions make the bubble noisier
#   COSTS_MEASURED  emulated costs with a real run's ratio: "auto" measures
#               tF:tB:tW in a real pp 2 zb-h1 run and scales tF to COSTS's; "" skips [auto]
#   SCHEDULES   the schedules of the emulated runs [all ten but naive]
#   MBS         micro-batch counts for the emulated runs ["4 8 16"]
#   REPEATS     runs per configuration; the table keeps the median [3]
#   STEPS       optimizer steps per run; the last one is measured [2]
#   REAL        1: also run real compute at pp 2, 0: skip, auto: if >= 2 cores [auto]
#   REAL_MBS    micro-batch counts for the real runs ["4 8"]
#   REAL_REPEATS runs per real configuration [3]
#   PLOT        1: draw bubble.png (installs matplotlib if missing), 0: skip [1]
#   MPIRUN      launcher [mpirun]
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
COSTS=${COSTS:-40,80,40}
MBS=${MBS:-4 8 16}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-2}
REAL=${REAL:-auto}
REAL_MBS=${REAL_MBS:-4 8}
REAL_REPEATS=${REAL_REPEATS:-3}
PLOT=${PLOT:-1}
MPIRUN=${MPIRUN:-mpirun}
COSTS_MEASURED=${COSTS_MEASURED-auto}
SCHEDULES=${SCHEDULES:-gpipe 1f1b interleaved zb-h1 zb-h2 zb-v zb-v-half zb-v-min dualpipev}
# the loop schedules for the real pp 2 runs (the V ones need 4 layers' worth of stages too,
# which the real model has, but on 2 busy cores the comparison is noise; see the docs)
REAL_SCHEDULES=${REAL_SCHEDULES:-gpipe 1f1b interleaved zb-h1}

bench_need_ringpipe
bench_mpi_as_root
cores=$(nproc)
if [ "$REAL" = auto ]; then
  if [ "$cores" -ge 2 ]; then REAL=1; else REAL=0; fi
fi

bench_out_dir runs
rm -rf "$OUT"/runs/*
fails=0
start=$(date +%s)

# Waiting ranks spin in MPI_Wait; with more ranks than cores, yielding lets a
# rank that wakes from its emulated action get a core sooner.
MPI_FLAGS=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
# Emulated runs: the model only sizes the messages and activation slots.
EMU_MODEL=(--layers 8 --channels 64 --heads 4 --seq 64 --batch 2)
# Real runs: big enough that compute (tens of ms per action) dominates messages.
REAL_MODEL=(--layers 8 --channels 128 --heads 4 --seq 64 --batch 4 --threads 1)
COMMON=(--steps "$STEPS" --eval-every 0 --sample-tokens 0 --measure-peak=0)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  echo "host: $(uname -n), $cores cores, $cpu"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "ringpipe: $RINGPIPE"
  echo "emulated: $MPIRUN -n 4 ${MPI_FLAGS[*]} $RINGPIPE train --pp 4 --schedule S [--vpp 2]" \
       "--microbatches M --emulate-compute $COSTS ${EMU_MODEL[*]} ${COMMON[*]}"
  if [ "$REAL" = 1 ]; then
    echo "real: $MPIRUN -n 2 ${MPI_FLAGS[*]} $RINGPIPE train --pp 2 --schedule S [--vpp 2]" \
         "--microbatches M ${REAL_MODEL[*]} ${COMMON[*]}"
  fi
  echo "repeats: emulated $REPEATS, real $REAL_REPEATS (table row = median measured idle/ideal)"
} >"$OUT/setup.txt"
cat "$OUT/setup.txt"

# run MODE NP SCHEDULE M REPEAT EXTRA...: one training run into its own folder.
run() {
  local mode=$1 np=$2 sched=$3 m=$4 rep=$5
  shift 5
  local dir="$OUT/runs/$mode-$sched-m$m-r$rep"
  local vpp=()
  case $sched in interleaved | zb-v* | dualpipev) vpp=(--vpp 2) ;; esac
  # a configuration the schedule refuses (dualpipev needs m >= 2p) is reported, not run
  if ! "$RINGPIPE" sim --schedule "$sched" --pp "$np" "${vpp[@]}" --microbatches "$m" \
       --timeline=0 >/dev/null 2>"$OUT/runs/refused.txt"; then
    [ "$rep" = 1 ] && printf '  %-5s %-12s m=%-3d refused: %s\n' "$mode" "$sched" "$m" \
      "$(sed 's/^ringpipe sim: error: //' "$OUT/runs/refused.txt")"
    return 0
  fi
  mkdir -p "$dir"
  # MPIRUN may carry a prefix such as "nice -n 5 mpirun": split it on purpose
  # shellcheck disable=SC2206
  local cmd=($MPIRUN -n "$np" "${MPI_FLAGS[@]}" "$RINGPIPE" train --pp "$np" --schedule "$sched"
    "${vpp[@]}" --microbatches "$m" "$@" "${COMMON[@]}" --out "$dir" --trace "$dir/trace.json")
  echo "${cmd[*]}" >"$dir/cmd.txt"
  if timeout 300 "${cmd[@]}" >"$dir/log.txt" 2>&1 && grep -q '"pipeline"' "$dir/metrics.jsonl"; then
    printf '  %-5s %-12s m=%-3d #%d  %s\n' "$mode" "$sched" "$m" "$rep" \
      "$(grep -m1 'bubble (idle' "$dir/log.txt" | sed 's/^ *//')"
  else
    echo "  $mode $sched m=$m #$rep FAILED, see $dir/log.txt" >&2
    tail -5 "$dir/log.txt" >&2 || true
    fails=$((fails + 1))
  fi
  # checkpoints and the prepared data are not part of the result
  rm -rf "$dir/ckpt" "$dir/data"
}

# advise MODE M COSTS: the advisor's choice at m micro-batches, with no memory
# limit, and from the ZB-H1 run's measured costs and sizes with what 1F1B plans
# (by the same memory model) as the limit
advise() {
  local mode=$1 m=$2 costs=$3 from="$OUT/runs/$1-zb-h1-m$2-r1/metrics.jsonl"
  "$RINGPIPE" sim --advise --pp 4 --layers 8 --microbatches "$m" --max-m "$m" \
    --costs "$costs" --act-mib 1 >"$OUT/runs/advice-$mode-m$m.txt" || true
  [ -f "$from" ] || return 0
  "$RINGPIPE" sim --advise --pp 4 --layers 8 --microbatches "$m" --max-m "$m" --from "$from" \
    --memory-like 1f1b >"$OUT/runs/advice-$mode-m$m-mem.txt" || true
}

# emulated MODE COSTS: every schedule at pp 4 for each m
emulated() {
  local mode=$1 costs=$2
  echo "== emulated compute ($mode), pp 4, costs $costs ms =="
  for m in $MBS; do
    "$RINGPIPE" sim --all --pp 4 --microbatches "$m" --costs "$costs" --timeline=0 \
      >"$OUT/runs/sim-$mode-pp4-m$m.txt"
    for rep in $(seq 1 "$REPEATS"); do
      for sched in $SCHEDULES; do
        run "$mode" 4 "$sched" "$m" "$rep" --emulate-compute "$costs" "${EMU_MODEL[@]}"
      done
    done
    advise "$mode" "$m" "$costs"
  done
}
emulated emu "$COSTS"

# The cost ratio of real compute on this machine, at COSTS's tF.
if [ "$COSTS_MEASURED" = auto ]; then
  COSTS_MEASURED=""
  if [ "$cores" -ge 2 ]; then
    run ratio 2 zb-h1 4 1 "${REAL_MODEL[@]}"
    COSTS_MEASURED=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if "\"pipeline\"" in l: p = json.loads(l)["pipeline"]
f = float(sys.argv[2].split(",")[0]) / p["tF_ms"]
print(",".join("%.1f" % (p[k] * f) for k in ("tF_ms", "tB_ms", "tW_ms")))' \
      "$OUT/runs/ratio-zb-h1-m4-r1/metrics.jsonl" "$COSTS" 2>/dev/null || true)
    rm -rf "$OUT/runs/ratio-zb-h1-m4-r1"
  fi
fi
if [ -n "$COSTS_MEASURED" ]; then
  echo "emulated with the measured cost ratio: --emulate-compute $COSTS_MEASURED" | tee -a "$OUT/setup.txt"
  emulated emur "$COSTS_MEASURED"
fi

if [ "$REAL" = 1 ]; then
  echo "== real compute, pp 2 ($cores cores) =="
  for m in $REAL_MBS; do
    for rep in $(seq 1 "$REAL_REPEATS"); do
      for sched in $REAL_SCHEDULES; do
        run real 2 "$sched" "$m" "$rep" "${REAL_MODEL[@]}"
      done
    done
  done
else
  echo "== real compute skipped (REAL=0 or fewer than 2 cores) =="
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/setup.txt"

python3 tools/plot_bubble.py table "$OUT"
rm -f "$OUT/bubble.png"  # only this run's plot, if it draws one
if [ "$PLOT" = 1 ]; then
  if ! python3 -c 'import matplotlib' 2>/dev/null; then
    echo "installing matplotlib for the plot"
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq python3-matplotlib >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq python3-matplotlib >/dev/null 2>&1; } ||
        true
    fi
    python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib ||
      python3 -m pip install -q --break-system-packages matplotlib || true
  fi
  if python3 -c 'import matplotlib' 2>/dev/null; then
    python3 tools/plot_bubble.py plot "$OUT"
  else
    echo "pipeline_bubble: matplotlib unavailable, no plot (table is in $OUT/bubble.md)" >&2
  fi
fi
drawn=""
if [ -f "$OUT/bubble.png" ]; then drawn=", bubble.png"; fi
echo "done in $(($(date +%s) - start)) s; results in $OUT (bubble.md, bubble.csv$drawn)"
if [ "$fails" -gt 0 ]; then
  echo "pipeline_bubble: $fails run(s) failed" >&2
  exit 1
fi
