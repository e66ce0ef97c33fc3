#!/usr/bin/env python3
"""Plots of a post-training demonstration (tools/rl_demo.sh).

Reads DIR/*/metrics.jsonl written by `ringpipe sft|grpo|ppo` and draws, against
steps: the SFT loss and held-out accuracy; the long GRPO run ("grpo"): rollout
reward, held-out exact-match accuracy, fraction of zero-std groups; and the
comparison runs (GRPO with each loss aggregation, PPO) over their common
length: reward, held-out accuracy, clip fraction and KL. Prints a summary table
(start, final and best held-out accuracy of every run) to stdout.

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


def series(rows, key, upto=None):
    xs, ys = [], []
    for r in rows:
        if key in r and (upto is None or r["step"] <= upto):
            xs.append(r["step"])
            ys.append(r[key])
    return xs, ys


def smooth(ys, k=9):
    """Trailing mean over k points: per-step rollout rewards are noisy."""
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= k:
            acc -= ys[i - k]
        out.append(acc / min(i + 1, k))
    return out


def label(d, name):
    """Run name plus its algorithm / loss aggregation from the checkpoint."""
    try:
        with open(os.path.join(d, name, "ckpt", "meta.json")) as f:
            meta = json.load(f)
        kind, opts = meta.get("kind", ""), meta.get("options", {})
        if kind == "grpo":
            return "%s (grpo, %s)" % (name, opts.get("loss_agg", opts.get("loss-agg", "?")))
        return "%s (%s)" % (name, kind)
    except (OSError, ValueError):
        return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    runs = {}
    for p in sorted(glob.glob(os.path.join(a.dir, "*", "metrics.jsonl"))):
        rows = load(p)
        if rows:
            runs[os.path.basename(os.path.dirname(p))] = rows
    if not runs:
        sys.exit("no */metrics.jsonl under %s" % a.dir)

    print("%-62s %6s %8s %8s %8s %8s %9s" % ("run", "steps", "start", "final", "best", "gain",
                                            "seconds"))
    for name, rows in runs.items():
        _, acc = series(rows, "heldout_acc")
        if not acc:
            continue
        secs = sum(r.get("seconds", 0.0) for r in rows)
        print("%-62s %6d %8.3f %8.3f %8.3f %+8.1f %9.0f" % (
            label(a.dir, name), rows[-1]["step"], acc[0], acc[-1], max(acc),
            100 * (acc[-1] - acc[0]), secs))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rl = {n: r for n, r in runs.items() if any("reward_mean" in x for x in r)}
    sft = {n: r for n, r in runs.items() if n not in rl}
    main_run = rl.get("grpo")
    cmp_runs = {n: r for n, r in rl.items() if n != "grpo"}
    upto = max((r[-1]["step"] for r in cmp_runs.values()), default=None)
    if main_run is not None and upto is not None:
        cmp_runs = dict(cmp_runs, grpo=main_run)  # the long run's start, for reference

    fig, ax = plt.subplots(2, 3, figsize=(18, 9.5))
    for n, rows in sft.items():
        xs, ys = series(rows, "loss")
        ax[0][0].plot(xs, ys, color="tab:gray", lw=0.8, label="%s loss" % n)
        xs, ys = series(rows, "heldout_acc")
        t = ax[0][0].twinx()
        t.plot(xs, ys, "o-", color="tab:green", label="%s held-out accuracy" % n)
        t.set_ylim(0, 1)
        t.legend(loc="center right", fontsize=8)
    ax[0][0].set_title("SFT from scratch (loss on answer tokens)")
    ax[0][0].set_ylabel("loss")
    ax[0][0].legend(loc="upper right", fontsize=8)

    if main_run is not None:
        xs, ys = series(main_run, "reward_mean")
        ax[0][1].plot(xs, smooth(ys), color="tab:blue", lw=0.8, label="rollout reward (smoothed)")
        xs, ys = series(main_run, "heldout_acc")
        ax[0][1].plot(xs, ys, "o-", ms=3, color="tab:red", label="held-out exact match")
        ax[0][1].set_ylim(0, 1)
        ax[0][1].set_title(label(a.dir, "grpo") + ": the long run")
        xs, ys = series(main_run, "zero_std_frac")
        ax[0][2].plot(xs, smooth(ys), label="zero-std groups (smoothed)")
        xs, ys = series(main_run, "resp_len")
        t = ax[0][2].twinx()
        t.plot(xs, smooth(ys), color="tab:orange", lw=0.8, label="response length")
        t.legend(loc="lower right", fontsize=8)
        ax[0][2].set_title("GRPO: groups with no signal; response length")

    for n, rows in sorted(cmp_runs.items()):
        lab = label(a.dir, n)
        xs, ys = series(rows, "reward_mean", upto)
        ax[1][0].plot(xs, smooth(ys), label=lab)
        xs, ys = series(rows, "heldout_acc", upto)
        ax[1][1].plot(xs, ys, "o-", ms=3, label=lab)
        xs, ys = series(rows, "kl_ref", upto)
        if any(y > 0 for y in ys):
            ax[1][2].plot(xs, ys, label="%s KL to start" % lab)
        xs, ys = series(rows, "clip_frac", upto)
        if any(y > 0 for y in ys):
            ax[1][2].plot(xs, ys, ls="--", label="%s clip fraction" % lab)
    ax[1][0].set_title("rollout reward (smoothed over 9 steps)")
    ax[1][1].set_title("held-out exact-match accuracy (greedy, 500 problems)")
    ax[1][2].set_title("KL to the starting policy / clip fraction")
    for row in ax:
        for x in row:
            x.set_xlabel("step")
            x.grid(alpha=0.3)
            if x.get_legend_handles_labels()[0]:
                x.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = a.out or os.path.join(a.dir, "rl_demo.png")
    fig.savefig(out, dpi=100)
    print("wrote", out)


if __name__ == "__main__":
    main()
