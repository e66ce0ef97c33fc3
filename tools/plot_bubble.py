#!/usr/bin/env python3
"""Tables and plot for bench/pipeline_bubble.sh.

usage: plot_bubble.py table OUT_DIR   -> OUT_DIR/bubble.md, bubble.csv, bubble_runs.csv
       plot_bubble.py plot OUT_DIR    -> OUT_DIR/bubble.png (needs matplotlib)

Reads OUT_DIR/runs/<mode>-<schedule>-m<M>-r<repeat>/{metrics.jsonl,log.txt}: the
{"pipeline": ...} line of metrics.jsonl (bubbles, peak in-flight micro-batches,
messages sent) and the report lines of the log (makespan, per-action costs,
activation slots), the simulator's table in runs/sim-<mode>-pp4-m<M>.txt
(planned activation slots per rank) and the advisor's choices in
runs/advice-<mode>-m<M>[-mem].txt. Modes: emu (emulated, tF = tI = tW), emur
(emulated with a real run's cost ratio), real.

Bubble definitions (as the report prints them): idle/total = sum of idle rank-time
/ (p * makespan); idle/ideal = sum idle / sum busy, the papers' (p-1)/m measure.
"""
import csv
import json
import os
import re
import statistics
import sys

SCHEDULES = ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "zb-v-half", "zb-v-min",
             "dualpipev"]
MODES = ("emu", "emur", "real")
MODE_NAMES = {"emu": "emulated pp4, tF=tI=tW", "emur": "emulated pp4, measured ratio"}
NUM = r"(-?[0-9.]+)"


def parse_log(path):
    """The end-of-run pipeline report of one run's stdout."""
    out = {"act_mib": [], "mpi_wait_ms": []}
    with open(path, errors="replace") as f:
        text = f.read()
    m = re.search(r"measured costs per rank: tF " + NUM + r" ms, tB " + NUM + r" ms, tW " + NUM,
                  text)
    if m:
        out["tF"], out["tB"], out["tW"] = (float(x) for x in m.groups())
    m = re.search(r"makespan: measured " + NUM + r" ms, predicted " + NUM + r" ms", text)
    if m:
        out["makespan"], out["pred_makespan"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"\| formula (.*) = " + NUM + r"\s*$", text, re.M)
    if m:
        out["formula_text"], out["formula"] = m.group(1), float(m.group(2))
    for m in re.finditer(r"rank (\d+): peak in-flight micro-batches (\d+), activation slots "
                         + NUM + r" MiB, W stash " + NUM + r" MiB, (?:W keep " + NUM +
                         r" MiB, )?MPI wait " + NUM + " ms", text):
        keep = float(m.group(5)) if m.group(5) else 0.0
        out["act_mib"].append(float(m.group(3)) + float(m.group(4)) + keep)  # slots + W stash + keep
        out["mpi_wait_ms"].append(float(m.group(6)))
    # newer runs allocate one buffer arena per rank (activations, W stashes and
    # message buffers, what W does not read freed at I): that is the memory
    arena = [float(m.group(2)) for m in
             re.finditer(r"rank (\d+) arena: planned " + NUM + r" MiB", text)]
    if arena:
        out["act_mib"] = arena
    return out


def parse_sim(path):
    """{schedule: planned activation slots per rank} from `ringpipe sim --all`."""
    res = {}
    if not os.path.exists(path):
        return res
    with open(path) as f:
        for line in f:
            parts = line.split("|")
            if len(parts) != 5:
                continue
            head = parts[0].split()
            if len(head) != 3 or head[0] not in SCHEDULES + ["naive"]:
                continue
            cols = re.split(r"\s{2,}", parts[4].strip())
            if len(cols) == 2:
                res[head[0]] = cols[0].split()
    return res


def parse_advice(path):
    """(schedule, vpp, m) the advisor chose, or None."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        m = re.search(r"^choice: --schedule (\S+) --vpp (\d+) --microbatches (\d+)", f.read(), re.M)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def replay_trace(path, p, sched=""):
    """Replays a run's Chrome trace through the schedule's dependencies with each
    action's own measured duration and zero message latency. Returns (makespan ms,
    idle/ideal bubble) or None. The gap to the measured makespan is what message
    latency and late wake-ups cost; the gap to the mean-cost prediction is what
    the spread of action durations costs."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError):
        return None
    acts = {}
    for e in events:
        if e.get("cat") != "compute":
            continue
        m = re.fullmatch(r"(\d+)([FBIW])(\d+)", e["name"])
        if m:
            acts.setdefault(e["tid"], []).append(
                (e["ts"], int(m.group(1)), m.group(2), int(m.group(3)), e["dur"] / 1e3))
    if len(acts) != p:
        return None
    for r in acts:
        acts[r].sort()
    nchunk = 1 + max(a[1] for r in acts for a in acts[r])
    nstage = p * nchunk
    # the V schedules put chunk 1 of rank r on stage 2p-1-r
    vmap = sched in ("zb-v", "zb-v-half", "zb-v-min", "dualpipev")
    done = {}  # (op class, stage, mb) -> end time; I counts as the backward
    nxt = {r: 0 for r in acts}
    free = {r: 0.0 for r in acts}
    busy = 0.0
    progress = True
    while progress:
        progress = False
        for r in acts:
            while nxt[r] < len(acts[r]):
                _, chunk, op, mb, dur = acts[r][nxt[r]]
                st = (r if chunk == 0 else 2 * p - 1 - r) if vmap else chunk * p + r
                if op == "F":
                    dep = ("F", st - 1, mb) if st > 0 else None
                elif op in "BI":
                    dep = ("B", st + 1, mb) if st + 1 < nstage else None
                else:
                    dep = None  # W follows its own I on this rank
                if dep and dep not in done:
                    break
                t0 = max(free[r], done[dep] if dep else 0.0)
                free[r] = t0 + dur
                busy += dur
                done[("F" if op == "F" else "B" if op in "BI" else "W", st, mb)] = free[r]
                nxt[r] += 1
                progress = True
    if any(nxt[r] < len(acts[r]) for r in acts):
        return None  # the trace does not follow this dependency model
    makespan = max(free.values())
    return makespan, (p * makespan - busy) / busy


def load_runs(out):
    runs = []
    rdir = os.path.join(out, "runs")
    for name in sorted(os.listdir(rdir)):
        m = re.fullmatch(r"(emu|emur|real)-(.+)-m(\d+)-r(\d+)", name)
        if not m:
            continue
        d = os.path.join(rdir, name)
        pipe = None
        try:
            with open(os.path.join(d, "metrics.jsonl")) as f:
                for line in f:
                    if '"pipeline"' in line:
                        pipe = json.loads(line)["pipeline"]
        except OSError:
            pass
        if pipe is None:
            continue
        r = {"mode": m.group(1), "schedule": m.group(2), "m": int(m.group(3)),
             "repeat": int(m.group(4)), "pp": pipe["pp"], "vpp": pipe["vpp"],
             "bubble_total": pipe["bubble_total"], "bubble_ideal": pipe["bubble_ideal"],
             "pred_total": pipe["predicted_bubble_total"],
             "pred_ideal": pipe["predicted_bubble_ideal"], "peak_live": pipe["peak_live"],
             "sends": pipe.get("sends", []), "msg_mib": pipe.get("msg_mib", float("nan"))}
        r.update(parse_log(os.path.join(d, "log.txt")))
        rep = replay_trace(os.path.join(d, "trace.json"), r["pp"], r["schedule"])
        r["replay_makespan"], r["replay_ideal"] = rep if rep else (float("nan"), float("nan"))
        runs.append(r)
    return runs


def median_rows(runs):
    """One row per (mode, schedule, m): the run with the median measured idle/ideal,
    with the spread over the repeats."""
    groups = {}
    for r in runs:
        groups.setdefault((r["mode"], r["schedule"], r["m"]), []).append(r)
    rows = []
    for key, g in groups.items():
        g = sorted(g, key=lambda r: r["bubble_ideal"])
        row = dict(g[(len(g) - 1) // 2])
        row["n"] = len(g)
        row["ideal_min"], row["ideal_max"] = g[0]["bubble_ideal"], g[-1]["bubble_ideal"]
        rows.append(row)
    order = {s: i for i, s in enumerate(SCHEDULES)}
    rows.sort(key=lambda r: (MODES.index(r["mode"]), r["m"], order.get(r["schedule"], 99)))
    base = {(r["mode"], r["m"]): r for r in rows if r["schedule"] == "1f1b"}
    for r in rows:
        b = base.get((r["mode"], r["m"]))
        ok = b and "makespan" in r and "makespan" in b
        r["tput_vs_1f1b"] = b["makespan"] / r["makespan"] if ok else float("nan")
        r["pred_tput_vs_1f1b"] = b["pred_makespan"] / r["pred_makespan"] if ok else float("nan")
        r["ideal_vs_1f1b"] = r["bubble_ideal"] / b["bubble_ideal"] if b else float("nan")
        r["pred_ideal_vs_1f1b"] = r["pred_ideal"] / b["pred_ideal"] if b else float("nan")
        r["rel_dev"] = (r["bubble_ideal"] - r["pred_ideal"]) / r["pred_ideal"] \
            if r["pred_ideal"] > 0 else float("nan")
    return rows


def pct(x):
    return "n/a" if x != x else f"{100 * x:.1f}%"


def write_table(out):
    runs = load_runs(out)
    if not runs:
        sys.exit(f"plot_bubble: no finished runs under {out}/runs")
    rows = median_rows(runs)
    sims, advice = {}, {}
    for r in rows:
        key = (r["mode"], r["m"])
        if r["mode"] != "real" and key not in sims:
            sims[key] = parse_sim(os.path.join(out, "runs", f"sim-{r['mode']}-pp4-m{r['m']}.txt"))
            advice[key] = (parse_advice(os.path.join(out, "runs", f"advice-{r['mode']}-m{r['m']}.txt")),
                           parse_advice(os.path.join(out, "runs",
                                                     f"advice-{r['mode']}-m{r['m']}-mem.txt")))
    for r in rows:
        choice, mem_choice = advice.get((r["mode"], r["m"]), (None, None))
        me = (r["schedule"], r["vpp"], r["m"])
        r["advised"] = ("A" if choice == me else "") + (" A<=1F1B mem" if mem_choice == me else "")

    fields = ["mode", "schedule", "pp", "vpp", "m", "repeat", "bubble_total", "bubble_ideal",
              "pred_total", "pred_ideal", "formula", "tF", "tB", "tW", "makespan",
              "pred_makespan", "replay_makespan", "replay_ideal", "peak_live", "act_mib",
              "mpi_wait_ms", "sends", "msg_mib"]
    with open(os.path.join(out, "bubble_runs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in runs:
            w.writerow([" ".join(map(str, r.get(k))) if isinstance(r.get(k), list)
                        else r.get(k, "") for k in fields])
    fields2 = fields[:5] + ["n", "ideal_min", "ideal_max"] + fields[6:] + \
        ["rel_dev", "ideal_vs_1f1b", "pred_ideal_vs_1f1b", "tput_vs_1f1b", "pred_tput_vs_1f1b",
         "advised"]
    with open(os.path.join(out, "bubble.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields2)
        for r in rows:
            w.writerow([" ".join(map(str, r.get(k))) if isinstance(r.get(k), list)
                        else r.get(k, "") for k in fields2])

    setup = ""
    if os.path.exists(os.path.join(out, "setup.txt")):
        with open(os.path.join(out, "setup.txt")) as f:
            setup = f.read()
    L = ["# Pipeline bubble: measured vs predicted", "", "```", setup.rstrip(), "```", "",
         "idle/total = sum idle / (p x makespan); idle/ideal = sum idle / sum busy (the papers' "
         "(p-1)/m). Predicted: the simulator on the same schedule with this run's mean measured "
         "tF, tB, tW (comm = 0). dev = (measured - predicted) / predicted of idle/ideal; spread: "
         "min-max measured idle/ideal over the repeats. Throughput vs 1F1B = makespan(1F1B) / "
         "makespan, same mode and m. In-flight: peak micro-batches holding activations per rank "
         "(measured: F until B or W; simulator: F until B or I, plus W stash). Replay: the "
         "run's own trace replayed through the schedule's dependencies with each action's "
         "measured duration and zero message latency, so measured - replay is what latency and "
         "late wake-ups cost and replay - predicted what the spread of action durations "
         "costs.", ""]
    L.append("A: the advisor's choice at this m with no memory limit; A<=1F1B mem: its choice "
             "under 1F1B's planned activation memory (from the runs' measured costs and sizes). "
             "Comm: messages sent per step by the busiest rank x one message's MiB.")
    L.append("")
    L.append("| mode | schedule | m | advisor | idle/total meas | pred | idle/ideal meas | pred "
             "| formula | dev | spread | replay idle/ideal | makespan ms meas / replay / pred "
             "| tput vs 1F1B meas / pred | in-flight per rank (meas) | planned act. slots "
             "| buffer MiB per rank (arena, or act. + W stash) | comm MiB |")
    L.append("|" + "---|" * 18)
    for r in rows:
        sim = sims.get((r["mode"], r["m"]), {}).get(r["schedule"])
        simtxt = " ".join(sim) if sim else "-"
        mode = MODE_NAMES.get(r["mode"], f"real pp{r['pp']}")
        sched = r["schedule"] + (f" v{r['vpp']}" if r["vpp"] > 1 else "")
        comm = max(r["sends"]) * r["msg_mib"] if r["sends"] else float("nan")
        L.append(f"| {mode} | {sched} | {r['m']} | {r['advised'] or '-'} | {pct(r['bubble_total'])} | "
                 f"{pct(r['pred_total'])} | {pct(r['bubble_ideal'])} | {pct(r['pred_ideal'])} | "
                 f"{pct(r.get('formula', float('nan')))} | {100 * r['rel_dev']:+.1f}% | "
                 f"{pct(r['ideal_min'])}-{pct(r['ideal_max'])} (n={r['n']}) | "
                 f"{pct(r['replay_ideal'])} | "
                 f"{r.get('makespan', float('nan')):.0f} / {r['replay_makespan']:.0f} / "
                 f"{r.get('pred_makespan', float('nan')):.0f} | "
                 f"{r['tput_vs_1f1b']:.2f} / {r['pred_tput_vs_1f1b']:.2f} | "
                 f"{' '.join(map(str, r['peak_live']))} | {simtxt} | "
                 f"{' '.join(f'{x:.1f}' for x in r['act_mib'])} | {comm:.2f} |")
    L += ["", "## The advisor against the measurements", ""]
    for key in sorted(advice, key=lambda k: (MODES.index(k[0]), k[1])):
        group = [r for r in rows if (r["mode"], r["m"]) == key and "makespan" in r]
        if not group:
            continue
        base = [r for r in group if r["schedule"] == "1f1b" and r["act_mib"]]
        limit = max(base[0]["act_mib"]) if base else float("inf")
        for label, ch in (("no limit", advice[key][0]), ("1F1B's memory", advice[key][1])):
            if not ch:
                continue
            # under the limit: the runs whose measured buffers (arena) fit 1F1B's
            pool = group if ch is advice[key][0] else \
                [r for r in group if r["act_mib"] and max(r["act_mib"]) <= limit * 1.001]
            got = [r for r in pool if (r["schedule"], r["vpp"], r["m"]) == ch]
            if not got:
                continue
            g = got[0]
            fastest = min(pool, key=lambda r: r["makespan"])
            rank = sorted(r["makespan"] for r in pool).index(g["makespan"]) + 1
            within = "" if pool is group else \
                f" within 1F1B's measured {limit:.1f} MiB ({', '.join(r['schedule'] for r in pool)})"
            L.append(f"- {MODE_NAMES[key[0]]}, m={key[1]}, {label}: advisor chose {ch[0]} v{ch[1]} "
                     f"(measured {g['makespan']:.0f} ms, rank {rank} of {len(pool)} by measured "
                     f"makespan{within}); fastest measured {fastest['schedule']} "
                     f"({fastest['makespan']:.0f} ms)")
    L += ["", "## Targets (emulated, idle/ideal)", ""]
    emu = [r for r in rows if r["mode"] in ("emu", "emur")]
    within = [r for r in emu if abs(r["rel_dev"]) <= 0.10]
    nan = float("nan")
    L.append(f"- measured within 10% of predicted: {len(within)} of {len(emu)} "
             f"(worst {max((abs(r['rel_dev']) for r in emu), default=nan) * 100:.1f}%, "
             f"median {statistics.median([abs(r['rel_dev']) for r in emu] or [nan]) * 100:.1f}%)")
    each = [r for r in runs if r["mode"] in ("emu", "emur") and r["pred_ideal"] > 0]
    ok = [r for r in each if abs(r["bubble_ideal"] - r["pred_ideal"]) <= 0.10 * r["pred_ideal"]]
    L.append(f"- single runs within 10%: {len(ok)} of {len(each)}")
    replayed = [r for r in emu if r["replay_makespan"] == r["replay_makespan"]]
    lat = [r["makespan"] - r["replay_makespan"] for r in replayed]
    jit = [r["replay_makespan"] - r["pred_makespan"] for r in replayed]
    if lat:
        L.append(f"- makespan excess over the prediction, median over rows: latency and wake-ups "
                 f"(measured - replay) {statistics.median(lat):.1f} ms, duration spread (replay - "
                 f"predicted) {statistics.median(jit):.1f} ms")
    for sched, target in (("interleaved", 0.5), ("zb-h1", 1 / 3), ("zb-h2", 1 / 3), ("zb-v", 1 / 6),
                          ("dualpipev", 1 / 6)):
        parts = []
        for r in [r for r in emu if r["mode"] == "emu"]:
            if r["schedule"] == sched:
                parts.append(f"m={r['m']}: measured {r['ideal_vs_1f1b']:.2f}, "
                             f"predicted {r['pred_ideal_vs_1f1b']:.2f}")
        L.append(f"- {sched} bubble / 1F1B bubble at tF = tI = tW (closed form {target:.2f}): "
                 + "; ".join(parts))
    L.append("")
    text = "\n".join(L)
    with open(os.path.join(out, "bubble.md"), "w") as f:
        f.write(text)
    print(text)


def plot(out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, PercentFormatter

    ticks = [0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2]

    def percent_axis(axis, lo, hi):
        axis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        axis.set_minor_formatter(NullFormatter())
        axis.set_ticks([t for t in ticks if lo <= t <= hi])

    rows = median_rows(load_runs(out))
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(modes) + 1, figsize=(5.2 * (len(modes) + 1), 4.4))
    colors = {"gpipe": "tab:blue", "1f1b": "tab:orange", "interleaved": "tab:green",
              "zb-h1": "tab:red", "zb-h2": "tab:purple", "zb-v": "tab:brown",
              "zb-v-half": "tab:pink", "zb-v-min": "tab:gray", "dualpipev": "tab:olive"}
    for ax, mode in zip(axes, modes):
        for k, s in enumerate(SCHEDULES):
            rs = sorted((r for r in rows if r["mode"] == mode and r["schedule"] == s),
                        key=lambda r: r["m"])
            if not rs:
                continue
            ms = [r["m"] for r in rs]
            ax.plot(ms, [r["pred_ideal"] for r in rs], "-", color=colors[s],
                    label=f"{s} predicted")
            if all("formula" in r for r in rs):
                ax.plot(ms, [r["formula"] for r in rs], ":", color=colors[s], alpha=0.6)
            y = [r["bubble_ideal"] for r in rs]
            err = [[v - r["ideal_min"] for v, r in zip(y, rs)],
                   [r["ideal_max"] - v for v, r in zip(y, rs)]]
            # nudge each schedule's markers sideways so equal bubbles stay visible
            ax.errorbar([x * 1.03 ** (k - 4) for x in ms], y, yerr=err, fmt="o",
                        color=colors[s], capsize=3, label=f"{s} measured")
        ax.plot([], [], "k:", alpha=0.6, label="closed form")
        pp = next((r["pp"] for r in rows if r["mode"] == mode), "?")
        ax.set_title(MODE_NAMES.get(mode, f"real compute, pp={pp}"), fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["m"] for r in rows if r["mode"] == mode}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_yscale("log")
        ys = [v for r in rows if r["mode"] == mode
              for v in (r["ideal_min"], r["ideal_max"], r["pred_ideal"])]
        percent_axis(ax.yaxis, min(ys) / 1.3, max(ys) * 1.3)
        ax.set_xlabel("micro-batches m")
        ax.set_ylabel("bubble, idle / ideal (gpipe's line is under 1f1b's)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5, ncol=2)
    ax = axes[-1]
    hi = max(max(r["bubble_ideal"], r["pred_ideal"]) for r in rows) * 1.3
    lo = min(min(r["bubble_total"], r["pred_total"]) for r in rows) / 1.3
    xs = [lo, hi]
    ax.plot(xs, xs, "k-", lw=0.8, label="measured = predicted")
    ax.fill_between(xs, [0.9 * x for x in xs], [1.1 * x for x in xs], color="gray", alpha=0.2,
                    label="within 10%")
    for mode, mk in (("emu", "o"), ("emur", "^"), ("real", "s")):
        for s in SCHEDULES:
            rs = [r for r in rows if r["mode"] == mode and r["schedule"] == s]
            if rs:
                ax.scatter([r["pred_ideal"] for r in rs], [r["bubble_ideal"] for r in rs],
                           marker=mk, color=colors[s], label=f"{s} ({mode}) idle/ideal")
                ax.scatter([r["pred_total"] for r in rs], [r["bubble_total"] for r in rs],
                           marker=mk, facecolors="none", edgecolors=colors[s])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    percent_axis(ax.xaxis, lo, hi)
    percent_axis(ax.yaxis, lo, hi)
    ax.set_xlabel("predicted bubble")
    ax.set_ylabel("measured bubble")
    ax.set_title("measured vs predicted (filled idle/ideal, hollow idle/total)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    path = os.path.join(out, "bubble.png")
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("table", "plot"):
        sys.exit(__doc__)
    (write_table if sys.argv[1] == "table" else plot)(sys.argv[2])
