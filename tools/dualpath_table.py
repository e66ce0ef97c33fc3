#!/usr/bin/env python3
"""Tables for bench/dualpath.sh: the ablation ladders (simulated and real) as
markdown, each rung's JCT ratio to Basic next to the paper's numbers.

usage: dualpath_table.py OUT_DIR   (reads OUT_DIR/sim-*.txt, real-ladder-r*.txt)
"""
import glob
import os
import re
import statistics
import sys

LINE = re.compile(r"^(\S+)\s+JCT\s+([0-9.]+) s\s+TTFT\s+([0-9.]+) s \(p99\s+([0-9.]+)\)\s+"
                  r"TPOT\s+([0-9.]+) s\s+hit\s+([0-9.]+)%\s+SNIC max/avg\s+([0-9.]+)")
# arXiv 2602.21548: offline JCT up to 1.87x, SNIC max/avg 1.53 -> 1.18, ablation steps
PAPER = {"basic": "1.00x", "+layerwise": "-17%", "+dualpath": "-38%",
         "+scheduler=DualPath": "-46% (up to 1.87x)", "oracle": "-"}


def ladders(path):
    """[(header, [(label, jct, ttft, p99, tpot, hit, snic)])] of one output file."""
    out, cur = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("==") or line.startswith("ablation:") or line.startswith("$"):
                cur = (line.strip(), [])
                out.append(cur)
            m = LINE.match(line)
            if m and cur is not None:
                cur[1].append((m.group(1),) + tuple(float(x) for x in m.groups()[1:]))
    return [(h, rows) for h, rows in out if rows]


def table(header, rows):
    base = rows[0][1]
    print(f"\n{header}\n")
    print("| run | JCT s | vs Basic | TTFT s | TPOT s | hit | SNIC max/avg | paper |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.3f} | {base / r[1]:.2f}x ({100 * (r[1] - base) / base:+.1f}%) | "
              f"{r[2]:.4f} | {r[4]:.5f} | {r[5]:.1f}% | {r[6]:.2f} | {PAPER.get(r[0], '')} |")


def main():
    d = sys.argv[1]
    for path in sorted(glob.glob(os.path.join(d, "sim-*.txt"))):
        print(f"\n### {os.path.basename(path)}")
        for h, rows in ladders(path):
            table(h, rows)
    real = sorted(glob.glob(os.path.join(d, "real-ladder-r*.txt")))
    if real:
        runs = [ladders(p)[0][1] for p in real]
        print(f"\n### real engine, median of {len(runs)} runs")
        med = []
        for i, r in enumerate(runs[0]):
            vals = [[run[i][k] for run in runs] for k in range(1, 7)]
            med.append((r[0],) + tuple(statistics.median(v) for v in vals))
        table("median per rung", med)


if __name__ == "__main__":
    main()
