#!/usr/bin/env python3
"""Writes the Hugging Face GPT-2 fixture of tests/io/test_hf.c, with transformers
itself, so that the test (which needs no Python) checks ringpipe against the
reference implementation.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors
    /tmp/venv/bin/python tools/make_hf_fixture.py tests/fixtures/hf_gpt2

A tiny random GPT-2 (2 layers, 16 wide, 2 heads, 32 positions, vocabulary 100:
not a multiple of 64, so ringpipe's padded rows are exercised) saved three ways:
  f32/   GPT2LMHeadModel.save_pretrained: names "transformer.*", lm_head dropped (tied)
  f16/   the same weights in float16, names without a prefix (as GPT2Model and the
         hub's gpt2 files have them) and lm_head.weight written out (tied: equal to wte)
  bf16/  GPT2LMHeadModel in bfloat16 via save_pretrained
and expected.safetensors: "ids" (I32 [12], a fixed prompt) and "logits.<variant>"
(F32 [12, 100]): each folder loaded back by GPT2LMHeadModel.from_pretrained in
float32, run on the prompt, in evaluation mode (no dropout)."""
import json, os, sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

IDS = [0, 17, 42, 99, 5, 5, 63, 64, 1, 98, 50, 7]


def logits_of(folder):
    m = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return m(torch.tensor([IDS])).logits[0].contiguous()


def main():
    out = sys.argv[1]
    torch.manual_seed(1234)
    cfg = GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=32, vocab_size=100,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # biases and LayerNorms away from 0 / 1 so that a swap shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(os.path.join(out, "f32"))
    model.to(torch.bfloat16).save_pretrained(os.path.join(out, "bf16"))

    f16 = os.path.join(out, "f16")
    os.makedirs(f16, exist_ok=True)
    sd = {k[len("transformer."):]: v.detach().to(torch.float32).half().contiguous()
          for k, v in GPT2LMHeadModel.from_pretrained(os.path.join(out, "f32")).state_dict().items()
          if k.startswith("transformer.")}
    sd["lm_head.weight"] = sd["wte.weight"].clone()
    save_file(sd, os.path.join(f16, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "f32", "config.json")) as f:
        conf = json.load(f)
    with open(os.path.join(f16, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)

    exp = {"ids": torch.tensor(IDS, dtype=torch.int32)}
    for v in ("f32", "f16", "bf16"):
        exp["logits." + v] = logits_of(os.path.join(out, v))
    save_file(exp, os.path.join(out, "expected.safetensors"),
              metadata={"prompt": " ".join(map(str, IDS))})
    for v in ("f32", "f16", "bf16"):  # keep only what ringpipe reads
        for extra in ("generation_config.json",):
            p = os.path.join(out, v, extra)
            if os.path.exists(p):
                os.remove(p)


if __name__ == "__main__":
    main()
