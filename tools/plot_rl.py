#!/usr/bin/env python3
"""Plots of a post-training demonstration (tools/rl_demo.sh).

Reads DIR/*/metrics.jsonl written by `ringpipe sft|grpo|ppo` and draws, against
steps: the SFT loss and held-out accuracy; the rollout reward and the held-out
exact-match accuracy of every RL run in DIR (GRPO with each loss aggregation,
PPO); and GRPO's fraction of zero-std groups and clip fraction. Prints a summary
table (start, final and best held-out accuracy per run).

usage: plot_rl.py DIR [--out FILE.png]
"""
import argparse
import glob
import json
import os
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def series(rows, key):
    xs, ys = [], []
    for r in rows:
        if key in r:
            xs.append(r["step"])
            ys.append(r[key])
    return xs, ys


def smooth(ys, k=9):
    if len(ys) < k:
        return ys
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= k:
            acc -= ys[i - k]
        out.append(acc / min(i + 1, k))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    runs = {}
    for p in sorted(glob.glob(os.path.join(a.dir, "*", "metrics.jsonl"))):
        name = os.path.basename(os.path.dirname(p))
        rows = load(p)
        if rows:
            runs[name] = rows
    if not runs:
        sys.exit("no */metrics.jsonl under %s" % a.dir)

    print("%-34s %6s %8s %8s %8s %8s" % ("run", "steps", "start", "final", "best", "gain"))
    for name, rows in runs.items():
        _, acc = series(rows, "heldout_acc")
        if not acc:
            continue
        steps = rows[-1]["step"]
        print("%-34s %6d %8.3f %8.3f %8.3f %+8.1f" % (name, steps, acc[0], acc[-1], max(acc),
                                                     100 * (acc[-1] - acc[0])))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rl = {n: r for n, r in runs.items() if any("reward_mean" in x for x in r)}
    sft = {n: r for n, r in runs.items() if n not in rl}
    fig, ax = plt.subplots(2, 2, figsize=(13, 9))
    for n, rows in sft.items():
        xs, ys = series(rows, "loss")
        ax[0][0].plot(xs, ys, color="tab:gray", lw=0.8, label="%s loss" % n)
        xs, ys = series(rows, "heldout_acc")
        t = ax[0][0].twinx()
        t.plot(xs, ys, "o-", color="tab:green", label="%s held-out acc" % n)
        t.set_ylabel("held-out exact match")
        t.set_ylim(0, 1)
        t.legend(loc="center right")
    ax[0][0].set_title("SFT (answer tokens only)")
    ax[0][0].set_xlabel("step")
    ax[0][0].set_ylabel("loss")
    ax[0][0].legend(loc="upper right")

    for n, rows in rl.items():
        xs, ys = series(rows, "reward_mean")
        ax[0][1].plot(xs, smooth(ys), label=n)
        xs, ys = series(rows, "heldout_acc")
        ax[1][0].plot(xs, ys, "o-", ms=3, label=n)
        xs, ys = series(rows, "zero_std_frac")
        if ys:
            ax[1][1].plot(xs, smooth(ys), label="%s zero-std groups" % n)
        xs, ys = series(rows, "clip_frac")
        ax[1][1].plot(xs, smooth(ys), ls="--", label="%s clipped" % n)
    ax[0][1].set_title("rollout reward (mean of samples, smoothed over 9 steps)")
    ax[1][0].set_title("held-out exact-match accuracy (greedy)")
    ax[1][1].set_title("fraction of zero-std groups / of clipped tokens")
    for x in (ax[0][1], ax[1][0], ax[1][1]):
        x.set_xlabel("RL step (one rollout batch)")
        x.legend(fontsize=8)
        x.grid(alpha=0.3)
    fig.tight_layout()
    out = a.out or os.path.join(a.dir, "rl_demo.png")
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
