#!/usr/bin/env bash
# Data-parallel gradient reduction hidden behind backward (issue 6): dp = 2 with
# --dp-overlap on and off, ZeRO-1 on and off, a few bucket sizes, on Open MPI's
# default (shared-memory) transport and on TCP (--mca btl tcp,self). Each
# configuration runs REPEATS times, on/off pairs back to back so that load on a
# shared machine hits both alike; the table keeps medians: per-step seconds from
# metrics.jsonl (all steps but the first of each run, pooled over repeats) and the
# trainer's "data parallel (last step)" line (reduction from first launch, and the
# part exposed after backward). Writes a markdown table to stdout and to
# OUT_DIR/dp_overlap.md.
#
# usage: bench/dp_overlap.sh [OUT_DIR]        (default bench/results)
#
# Environment knobs (defaults in brackets):
#   RINGPIPE   the ringpipe binary [build/ringpipe]
#   MODEL      model flags ["--layers 4 --channels 256 --heads 4 --seq 128 --batch 2"]
#              (3.3M parameters: 12.4 MiB of gradients against ~0.2 s of compute per
#              step, so the reduction is a share of the step that overlap can win)
#   BUCKETS    bucket sizes in MiB for the shared-memory runs ["1 4 16"]
#   TCP_BUCKET bucket size for the TCP runs; empty: skip TCP [4]
#   REPEATS    runs per configuration [3]
#   STEPS      optimizer steps per run (the first is dropped) [10]
#   THREADS    compute threads per rank [1]
#   MPIRUN     launcher [mpirun]
set -euo pipefail
. "$(dirname "$0")/common.sh" "$@"
MODEL=${MODEL:---layers 4 --channels 256 --heads 4 --seq 128 --batch 2}
BUCKETS=${BUCKETS:-1 4 16}
TCP_BUCKET=${TCP_BUCKET-4}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-10}
THREADS=${THREADS:-1}
MPIRUN=${MPIRUN:-mpirun}

bench_need_ringpipe
bench_mpi_as_root
bench_out_dir
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r -a model <<<"$MODEL"
common=(--steps "$STEPS" --threads "$THREADS" --eval-every 0 --eval-batches 1
        --sample-tokens 0 --measure-peak=0 --quiet)
runs="$work/runs.tsv"   # transport zero bucket overlap repeat log metrics
: >"$runs"

# run TRANSPORT ZERO BUCKET OVERLAP REPEAT
run() {
  local tr=$1 zero=$2 bucket=$3 ov=$4 rep=$5 mca=()
  local tag="${tr}_z${zero}_b${bucket}_${ov}_r${rep}"
  [ "$tr" = tcp ] && mca=(--mca btl "tcp,self")
  local cmd=("$MPIRUN" -n 2 --oversubscribe --bind-to none "${mca[@]}" "$RINGPIPE" train
             "${model[@]}" "${common[@]}" --zero "$zero" --bucket-mb "$bucket"
             "--$([ "$ov" = on ] || echo no-)dp-overlap" --out "$work/$tag")
  echo "dp_overlap.sh: ${cmd[*]}" >&2
  if ! "${cmd[@]}" >"$work/$tag.log" 2>&1; then
    echo "dp_overlap.sh: run $tag failed; its log:" >&2
    cat "$work/$tag.log" >&2
    exit 1
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tr" "$zero" "$bucket" "$ov" "$rep" \
    "$work/$tag.log" "$work/$tag/metrics.jsonl" >>"$runs"
}

start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq 1 "$REPEATS"); do
  for zero in 0 1; do
    for b in $BUCKETS; do
      # alternate which of the pair goes first so neither always gets the warmer machine
      if [ $((rep % 2)) = 1 ]; then order="on off"; else order="off on"; fi
      for ov in $order; do run shm "$zero" "$b" "$ov" "$rep"; done
    done
    if [ -n "$TCP_BUCKET" ]; then
      for ov in on off; do run tcp "$zero" "$TCP_BUCKET" "$ov" "$rep"; done
    fi
  done
done
end=$(date +%s)
load1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$runs" "$MODEL" "$STEPS" "$REPEATS" "$THREADS" "$((end - start))" "$load0" "$load1" \
  >"$OUT/dp_overlap.md" <<'EOF'
import json, re, sys, statistics, datetime, platform, os

runs, model, steps, repeats, threads, secs, load0, load1 = sys.argv[1:9]
cfg = {}
for line in open(runs):
    tr, zero, bucket, ov, rep, log, metrics = line.rstrip("\n").split("\t")
    text = open(log).read()
    m = re.search(r"data parallel \(last step\): (\d+) buckets, .*?reduction ([0-9.]+) ms from "
                  r"first launch, ([0-9.]+) ms exposed", text)
    if not m:
        sys.exit("dp_overlap.sh: no 'data parallel' line in " + log)
    secs_steps = [r["seconds"] for r in map(json.loads, open(metrics)) if "seconds" in r][1:]
    d = cfg.setdefault((tr, int(zero), float(bucket)), {}).setdefault(
        ov, {"steps": [], "exposed": [], "reduce": [], "buckets": int(m.group(1))})
    d["steps"] += secs_steps
    d["reduce"].append(float(m.group(2)))
    d["exposed"].append(float(m.group(3)))

med = statistics.median
now = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
print("# Data-parallel gradient reduction: overlap on vs off (dp = 2)\n")
print(f"date: {now}, host {platform.node()}, {os.cpu_count()} cores, load average "
      f"{load0} at start and {load1} at the end; model `{model}`, {threads} thread(s) per "
      f"rank, {steps} steps per run (first dropped), {repeats} runs per configuration, "
      f"all runs took {secs} s\n")
print("step s: median seconds per step; exposed: ms the step waits on the reduction after "
      "backward (median over runs, last step); reduction: ms from the first bucket's launch "
      "to the last completion; hidden (est.): reduction with overlap off minus exposed with "
      "overlap on; reduction share: reduction ms over step s, both with overlap off (about "
      "the most overlap could save).\n")
print("| transport | ZeRO | bucket MiB | buckets | step s on | step s off | on/off | "
      "exposed ms on | exposed ms off | reduction ms on | reduction ms off | hidden ms (est.) | "
      "reduction share |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (tr, zero, bucket), d in sorted(cfg.items(), key=lambda kv: (kv[0][0] != "shm",) + kv[0]):
    on, off = d["on"], d["off"]
    son, soff = med(on["steps"]), med(off["steps"])
    eon, eoff = med(on["exposed"]), med(off["exposed"])
    ron, roff = med(on["reduce"]), med(off["reduce"])
    print(f"| {'shared memory' if tr == 'shm' else 'tcp'} | {zero} | {bucket:g} | "
          f"{on['buckets']} | {son:.3f} | {soff:.3f} | {son / soff:.3f} | {eon:.1f} | "
          f"{eoff:.1f} | {ron:.1f} | {roff:.1f} | {roff - eon:.1f} | "
          f"{100 * roff / 1e3 / soff:.0f}% |")
print()
print("Spread (min-max over runs) of exposed ms, to judge the noise:\n")
for (tr, zero, bucket), d in sorted(cfg.items(), key=lambda kv: (kv[0][0] != "shm",) + kv[0]):
    parts = [f"{ov} {min(d[ov]['exposed']):.1f}-{max(d[ov]['exposed']):.1f}" for ov in ("on", "off")]
    print(f"- {tr}, ZeRO {zero}, bucket {bucket:g} MiB: " + ", ".join(parts))
EOF
cat "$OUT/dp_overlap.md"
