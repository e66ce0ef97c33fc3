"""PyTorch side of bench/vs_torch.sh: the same GPT-2 training step and the same
attention forward+backward as ringpipe, timed the same way.

  vs_torch.py train --impl eager|compile|compile-max --layers L --channels C --heads NH
                    --seq T --batch B --vocab V --steps S --warmup W --threads N
      prints "tokens/s: X" (mean over the steps after the warm-up ones) and,
      with 2 steps or more, "  per step: median M tokens/s, slowest S, fastest
      F" as `ringpipe bench train` prints it; compile is torch.compile's default
      mode, compile-max its mode="max-autotune" (longer compilation that
      benchmarks its kernel choices; the default model on the Emerald Rapids
      VM, 2 alternating pairs: 2428-2482 tokens/s against 2536-2717 in the
      default mode)
  vs_torch.py attention --impl sdpa --seq T --causal 0|1 --batch B --heads NH
                    --head-size HS --threads N --min-seconds S     (pass --batch: its default is train's)
      prints "fb_ms: X" (best forward+backward, like `ringpipe bench attention`);
      with --cpu-time (and --threads 1) in this thread's CPU time, like
      build/bench/bench_flash_cpu: steady on a machine shared with other jobs
  vs_torch.py gemm --channels C --seq T --batch B --vocab V --threads N
      prints "gemm_gflops: X": the model's GEMM shapes (a layer's four and the
      LM head) forward and backward (dinp, dweight) through torch.mm into
      preallocated outputs, timed as `ringpipe bench gemm` times its modes
      (every shape once a pass, the fastest of 4 passes after a warm one);
      with --square N one N x N x N product instead, the rate the BLAS reaches
      where a GEMM is big enough for its blocking to pay (the ceiling of a
      step made only of GEMMs)

The model is GPT-2 as ringpipe builds it: learned positions, pre-LayerNorm
blocks, tanh GELU, causal attention (scaled_dot_product_attention), final
LayerNorm, LM head tied to the token embedding, vocabulary padded to a multiple
of 64, random N(0, 0.02) init, AdamW (betas 0.9/0.95, weight decay 0.1 on
matrices), gradient clipping at 1.0, fp32, random tokens."""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        shape = (B, T, self.NH, C // self.NH)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, Vp):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def train(a):
    Vp = (a.vocab + 63) // 64 * 64
    model = GPT(a.layers, a.channels, a.heads, a.seq, Vp)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    # torch.compile's mode for each compiled variant (None: its default)
    modes = {"compile": None, "compile-max": "max-autotune"}
    compiled = a.impl in modes
    if compiled and os.environ.get("ATEN_CPU_CAPABILITY") == "avx2":
        # vs_torch.sh ISA=avx2: PyTorch 2.15's inductor, left to read
        # ATEN_CPU_CAPABILITY=avx2 itself, trained to a non-finite loss on an
        # AVX-512 CPU (every time); the same AVX2 width given in its config
        # trains normally
        import torch._inductor.config as inductor_config
        inductor_config.cpp.simdlen = 256
    fwd = torch.compile(model, mode=modes[a.impl]) if compiled else model
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)

    def step():
        opt.zero_grad(set_to_none=False)
        # bf16: PyTorch's mixed precision on CPU (bf16 matmuls through oneDNN,
        # fp32 weights and AdamW), the counterpart of ringpipe --precision bf16
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(a.warmup):     # compile (if any) and first-touch happen here
        step()
    step_s = []
    t0 = time.perf_counter()
    for _ in range(a.steps):
        t1 = time.perf_counter()
        loss = step()   # CPU tensors: the step's work is done when it returns
        step_s.append(time.perf_counter() - t1)
    dt = time.perf_counter() - t0
    if not math.isfinite(loss.item()):
        sys.exit("vs_torch.py: non-finite loss")
    print(f"tokens/s: {a.steps * a.batch * a.seq / dt:.1f}")
    print_step_spread([a.batch * a.seq / s for s in step_s])


def print_step_spread(rates):
    """The per-step rates' median and extremes, in `ringpipe bench train`'s
    words: one slow step (a neighbour, a collection) moves a short run's mean,
    and the medians of both sides compare the steps either side ran most."""
    if len(rates) < 2:
        return
    r = sorted(rates)
    n = len(r)
    median = r[n // 2] if n % 2 else 0.5 * (r[n // 2 - 1] + r[n // 2])
    print(f"  per step: median {median:.0f} tokens/s, slowest {r[0]:.0f}, fastest {r[-1]:.0f}")


def attention(a):
    C = a.heads * a.head_size
    g = torch.Generator().manual_seed(a.seq)
    qkv = (2 * torch.rand(a.batch, a.seq, 3, a.heads, a.head_size, generator=g) - 1)
    qkv.requires_grad_(True)
    dout = 2 * torch.rand(a.batch, a.heads, a.seq, a.head_size, generator=g) - 1
    # --cpu-time: this thread's CPU time, for one thread on a shared machine
    # (as build/bench/bench_flash_cpu times ringpipe's flash)
    clock = time.thread_time if a.cpu_time else time.perf_counter
    if a.cpu_time and a.threads != 1:
        sys.exit("vs_torch.py: --cpu-time measures one thread; use --threads 1")
    best, spent, rep = 1e30, 0.0, 0
    while rep < 2 or spent < a.min_seconds:
        qkv.grad = None
        t0 = clock()
        q, k, v = qkv.unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=bool(a.causal))
        y.backward(dout)
        dt = clock() - t0
        best, spent, rep = min(best, dt), spent + dt, rep + 1
        if spent > 20 * a.min_seconds:
            break
    assert C > 0
    print(f"fb_ms: {1e3 * best:.3f}")


def best_rate(run, flops):
    """flops / seconds of run(), the fastest of 4 passes after a warm one."""
    best = 0.0
    for rep in range(5):
        t0 = time.perf_counter()
        run()
        rate = flops / (time.perf_counter() - t0)
        if rep > 0:
            best = max(best, rate)
    return best


def gemm_square(n):
    """One n x n x n torch.mm into a preallocated output."""
    g = torch.Generator().manual_seed(1)
    x, w = torch.rand(n, n, generator=g) - 0.5, torch.rand(n, n, generator=g) - 0.5
    y = torch.empty(n, n)
    best = best_rate(lambda: torch.mm(x, w, out=y), 2.0 * n ** 3)
    print(f"gemm_gflops: {best / 1e9:.1f}")


def gemm(a):
    """PyTorch's fp32 GEMM (its BLAS: MKL in the x86 wheels) on the shapes and
    passes of ringpipe's rp_gemm_peak."""
    if a.square > 0:
        gemm_square(a.square)
        return
    N, C = a.batch * a.seq, a.channels
    Vp = (a.vocab + 63) // 64 * 64
    shapes = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, Vp)]
    g = torch.Generator().manual_seed(1)
    ops = []
    for IC, OC in shapes:
        x, dy = torch.rand(N, IC, generator=g) - 0.5, torch.rand(N, OC, generator=g) - 0.5
        w = torch.rand(OC, IC, generator=g) - 0.5
        ops.append((x, w, dy, torch.empty(N, OC), torch.empty(N, IC), torch.empty(OC, IC)))
    flops = sum(6.0 * N * IC * OC for IC, OC in shapes)

    def every_shape():
        for x, w, dy, y, dx, dw in ops:
            torch.mm(x, w.t(), out=y)
            torch.mm(dy, w, out=dx)
            torch.mm(dy.t(), x, out=dw)

    best = best_rate(every_shape, flops)
    print(f"gemm_gflops: {best / 1e9:.1f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "attention", "gemm"])
    p.add_argument("--impl", default="eager", choices=["eager", "compile", "compile-max", "sdpa"])
    for k, v in [("layers", 6), ("channels", 384), ("heads", 6), ("seq", 256),
                 ("batch", 4), ("vocab", 256), ("steps", 10), ("warmup", 3),
                 ("threads", 2), ("head_size", 64), ("causal", 1), ("square", 0)]:
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    p.add_argument("--min-seconds", type=float, default=0.5)
    p.add_argument("--cpu-time", action="store_true")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    {"train": train, "attention": attention, "gemm": gemm}[a.what](a)


if __name__ == "__main__":
    main()
