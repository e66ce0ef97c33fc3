#!/usr/bin/env python3
"""ringpipe -> Hugging Face: a checkpoint directory written by `ringpipe train`
loads with GPT2LMHeadModel.from_pretrained(dir) as it is (its config.json, no
hand-written files) and gives ringpipe's logits within 1e-5; and the checkpoint
reloaded as a plain Hugging Face folder (the model saved back by transformers)
gives them again. Needs torch + transformers; exits 77 (skipped) without them.

    check_hf_transformers.py RINGPIPE HF_LOGITS"""
import json, os, subprocess, sys, tempfile

try:
    import torch
    from transformers import GPT2LMHeadModel
except ImportError as e:
    print(f"skipped: transformers/torch not importable ({e}); to run this check: "
          "python3 -m venv V && V/bin/pip install torch transformers && "
          "V/bin/python tests/io/check_hf_transformers.py build/ringpipe build/tests/io/hf_logits")
    sys.exit(77)

IDS = [70, 105, 114, 115, 116, 32, 67, 105, 116, 105, 122, 101, 110, 58]


def rp_logits(tool, d):
    out = subprocess.run([tool, d] + [str(i) for i in IDS], check=True, capture_output=True,
                         text=True).stdout
    return torch.tensor(json.loads(out)["logits"], dtype=torch.float32)


def hf_logits(d):
    m = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        return m(torch.tensor([IDS])).logits[0]


def check(name, a, b):
    err = ((a - b).abs() / b.abs().clamp(min=1)).max().item()
    print(f"{name}: max rel logit difference {err:.3g}")
    if not err <= 1e-5:
        print(f"FAIL: {name} differs by {err} > 1e-5")
        sys.exit(1)


def main():
    ringpipe, tool = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run")
        subprocess.run([ringpipe, "train", "--layers", "2", "--channels", "32", "--heads", "2",
                        "--seq", "32", "--batch", "2", "--steps", "3", "--sample-tokens", "0",
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
        ck = os.path.join(out, "ckpt")
        ours = rp_logits(tool, ck)
        check("ringpipe checkpoint in transformers", ours, hf_logits(ck))
        back = os.path.join(d, "hf")
        GPT2LMHeadModel.from_pretrained(ck).save_pretrained(back)
        check("transformers' save_pretrained folder in ringpipe", rp_logits(tool, back), ours)
    print("ok")


if __name__ == "__main__":
    main()
