#!/usr/bin/env python3
"""Peer benchmark: one GPT-2 training step in PyTorch (CPU, float32 or bf16 autocast).

Times forward + backward + AdamW step on random tokens and prints one JSON line:
  {"peer": "pytorch", "torch": ..., "step_ms": ..., "tokens_per_sec": ..., "threads": ..., "blas": ...}

Run with Debian's PyTorch, and give BLAS the same thread count as torch:

    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/peers/pytorch_gpt2_step.py --threads 2

Debian's torch does fp32 matmuls through the system libblas.so.3 (whichever
implementation update-alternatives selects: OpenBLAS if libopenblas0-* is
installed, otherwise the slow single-threaded netlib reference BLAS). That
library reads OPENBLAS_NUM_THREADS itself and ignores torch.set_num_threads,
so set both. The "blas" field in the output reports which libblas was loaded.

Model: GPT-2 small (n_layer=12, n_head=12, n_embd=768, block_size=1024,
vocab 50257), pre-LayerNorm, tied head, explicit causal attention (torch 1.13
has no F.scaled_dot_product_attention), GELU tanh approximation; same layout
as tests/fixtures/make_gpt2_reference.py. AdamW lr 6e-4, betas (0.9, 0.95),
weight decay 0.1 on 2-D tensors and 0 on biases / LayerNorm params.
--n-layer/--n-head/--n-embd/--block-size give other sizes (kiln's configs/small.toml
is --n-layer 4 --n-head 4 --n-embd 256).

--dtype bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
(backward follows the autocast casts), with fp32 master weights and an fp32 AdamW,
the same scheme as kiln's train.dtype = "bf16". Autocast bf16 matmuls go through
oneDNN (mkldnn) inside torch, not the system BLAS.
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def attn(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT2(nn.Module):
    def __init__(self, n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif "ln" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def loaded_blas():
    """Which libblas/openblas the process actually mapped (after a matmul)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in line.lower() and "/" in line}
    except OSError:
        return "unknown"
    real = sorted({os.path.realpath(p) for p in paths})
    if any("openblas" in p for p in real):
        return "openblas"
    if any("/blas/libblas" in p for p in real):
        return "netlib-reference"
    return ",".join(real) or "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=11, help="timed steps; the first is warm-up")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast(\"cpu\", dtype=torch.bfloat16) over forward and loss")
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--block-size", type=int, default=1024)
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first step is not counted)")

    want = str(args.threads)
    have = os.environ.get("OPENBLAS_NUM_THREADS")
    if have != want:
        print(f"WARNING: OPENBLAS_NUM_THREADS is {have!r}, expected {want!r}. Debian's torch does fp32 "
              f"matmuls in the system BLAS, which ignores torch.set_num_threads; rerun as\n"
              f"  OPENBLAS_NUM_THREADS={want} {sys.executable} {' '.join(sys.argv)}",
              file=sys.stderr)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = GPT2(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                 block_size=args.block_size)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(p.numel() for p in model.parameters())
    B, T = args.batch, args.seq
    tokens = torch.randint(0, 50257, (B, T + 1))
    x, y = tokens[:, :T].contiguous(), tokens[:, 1:].contiguous()

    blas = None
    times = []
    for s in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = model(x, y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        if blas is None:
            blas = loaded_blas()
            if blas != "openblas":
                print(f"WARNING: torch is using BLAS '{blas}', not OpenBLAS; fp32 matmuls will be slow "
                      f"and single-threaded (install libopenblas0-pthread to switch libblas.so.3)",
                      file=sys.stderr)
        print(f"step {s + 1}/{args.steps}: {dt * 1e3:.1f} ms loss {loss.item():.4f}", file=sys.stderr)

    step_s = statistics.median(times[1:])
    print(f"GPT-2 {n_params / 1e6:.1f}M params, {args.dtype}, B={B} T={T}, threads={args.threads}, "
          f"blas={blas}: median {step_s * 1e3:.1f} ms/step over steps 2..{args.steps}, "
          f"{B * T / step_s:.1f} tokens/s", file=sys.stderr)
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__,
                      "step_ms": round(step_s * 1e3, 3),
                      "tokens_per_sec": round(B * T / step_s, 3),
                      "threads": args.threads, "blas": blas, "dtype": args.dtype,
                      "batch": B, "seq": T, "n_layer": args.n_layer, "n_embd": args.n_embd,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
