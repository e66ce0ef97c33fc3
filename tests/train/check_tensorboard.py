#!/usr/bin/env python3
"""TensorBoard events of real runs (pre-training on one rank and pipelined on
two, SFT, GRPO): every record's framing and CRCs check (tools/tb_events.py,
standard library only), the scalars are exactly metrics.jsonl's numbers
(float32), the tags include every metric the runs print, a flipped byte is
caught, and, when the tensorboard package is installed, its own reader loads
the same scalars (skipped with a message otherwise).

    check_tensorboard.py RINGPIPE MPIRUN [MPIRUN ARGS...]"""
import glob, json, os, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from tb_events import crc32c, read_scalars  # noqa: E402

TINY = ["--layers", "2", "--channels", "32", "--heads", "2", "--seq", "32", "--batch", "2",
        "--sample-tokens", "0", "--threads", "1", "--quiet"]
WANT = {
    "train": ["loss", "lr", "grad_norm", "tokens_per_s", "mfu", "seconds", "val_loss",
              "memory_mib/params", "memory_mib/activations", "memory_mib/total"],
    "pp": ["loss", "pipeline/bubble_total", "pipeline/predicted_bubble_total",
           "pipeline/makespan_ms", "pipeline/peak_live/0", "pipeline/peak_live/1"],
    "sft": ["loss", "lr", "grad_norm", "heldout_acc"],
    "grpo": ["reward_mean", "kl_ref", "heldout_acc", "heldout_reward", "loss"],
}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def flatten(v, tag, out):
    if isinstance(v, dict):
        for k, x in v.items():
            flatten(x, f"{tag}/{k}" if tag else k, out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            flatten(x, f"{tag}/{i}", out)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        out[tag] = v


def expected(out_dir):
    """{tag: [(step, float32 value)]} from metrics.jsonl, as the mirror maps it."""
    want, step = {}, 0
    for line in open(os.path.join(out_dir, "metrics.jsonl")):
        rec = json.loads(line)
        step = rec.pop("step", step)
        flat = {}
        flatten(rec, "", flat)
        for tag, v in flat.items():
            f32 = struct.unpack("<f", struct.pack("<f", v))[0]
            want.setdefault(tag, []).append((step, f32))
    return want


def check_run(name, out_dir):
    files = glob.glob(os.path.join(out_dir, "tensorboard", "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"{name}: {len(files)} event files in {out_dir}/tensorboard, want 1")
    try:
        got = read_scalars(files[0])
    except ValueError as e:
        fail(f"{name}: {files[0]}: {e}")
    want = expected(out_dir)
    if got != want:
        diff = sorted(set(got) ^ set(want)) or [t for t in want if got.get(t) != want[t]]
        fail(f"{name}: event scalars differ from metrics.jsonl, e.g. {diff[:5]}")
    missing = [t for t in WANT[name] if t not in got]
    if missing:
        fail(f"{name}: no scalars for {missing}")
    print(f"{name}: {sum(map(len, got.values()))} scalars in {len(got)} tags, CRCs valid, equal "
          "to metrics.jsonl")
    return files[0], got


def check_memory_formulas(out_dir):
    """The run's last line: measured peaks equal docs/memory.md's formulas (MiB, 3 decimals)."""
    last = json.loads(open(os.path.join(out_dir, "metrics.jsonl")).read().splitlines()[-1])
    meas, form = last.get("memory_mib", {}), last.get("memory_formula_mib", {})
    for cat in ("params", "grads", "optimizer", "activations"):
        if cat not in form or abs(meas.get(cat, -1) - form[cat]) > 0.0015:
            fail(f"memory {cat}: measured {meas.get(cat)} MiB, formula {form.get(cat)} MiB")
    print("memory peaks equal the formulas: " + ", ".join(f"{c} {form[c]}" for c in form))


def check_corruption_caught(path):
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 2] ^= 0x40
    bad = path + ".corrupt"
    open(bad, "wb").write(raw)
    try:
        read_scalars(bad)
    except ValueError as e:
        print(f"corrupted copy refused: {e}")
        return
    finally:
        os.remove(bad)
    fail("a flipped byte went unnoticed")


def check_with_tensorboard(path, got):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        print("tensorboard package not installed: its reader was not run (pip install "
              "tensorboard to include it)")
        return
    ea = EventAccumulator(path, size_guidance={"scalars": 0})
    ea.Reload()
    theirs = {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}
    if theirs != got:
        fail(f"tensorboard's reader sees other scalars: {sorted(set(theirs) ^ set(got))[:5]}")
    print(f"tensorboard's EventAccumulator reads the same {len(theirs)} tags")


def main():
    rp, mpirun = sys.argv[1], sys.argv[2:]
    if crc32c(b"123456789") != 0xE3069283:  # the CRC-32C check value (RFC 3720)
        fail("the reader's CRC32C is wrong")
    with tempfile.TemporaryDirectory() as d:
        runs = {
            "train": [rp, "train"] + TINY + ["--steps", "4", "--eval-every", "2",
                                             "--recompute", "selective", "--zero", "1"],
            "pp": mpirun + ["-n", "2", rp, "train", "--pp", "2", "--microbatches", "2"] + TINY
                  + ["--steps", "2", "--eval-every", "0"],
            "sft": [rp, "sft", "--steps", "2", "--threads", "1", "--quiet"],
            "grpo": [rp, "grpo", "--steps", "1", "--threads", "1", "--quiet"],
        }
        first = None
        for name, cmd in runs.items():
            out = os.path.join(d, name)
            subprocess.run(cmd + ["--out", out], check=True, stdout=subprocess.DEVNULL,
                           timeout=120)
            path, got = check_run(name, out)
            first = first or (path, got)
        check_memory_formulas(os.path.join(d, "train"))
        check_corruption_caught(first[0])
        check_with_tensorboard(*first)
    print("ok")


if __name__ == "__main__":
    main()
