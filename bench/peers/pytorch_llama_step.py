#!/usr/bin/env python3
"""Peer benchmark: one Llama training step in PyTorch (CPU, float32 or bf16 autocast).

Times forward + backward + AdamW step on random tokens and prints one JSON line:
  {"peer": "pytorch", "torch": ..., "step_ms": ..., "tokens_per_sec": ..., "threads": ..., "blas": ...}

Run with Debian's PyTorch, and give BLAS the same thread count as torch:

    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/peers/pytorch_llama_step.py --threads 2 \
        --config configs/llama-small.toml

Debian's torch does fp32 matmuls through the system libblas.so.3 (whichever
implementation update-alternatives selects: OpenBLAS if libopenblas0-* is
installed, otherwise the slow single-threaded netlib reference BLAS). That
library reads OPENBLAS_NUM_THREADS itself and ignores torch.set_num_threads,
so set both. The "blas" field in the output reports which libblas was loaded.

Model: Hugging Face's LlamaForCausalLM math in plain torch, as in
tests/fixtures/make_llama_reference.py: RMSNorm before attention and MLP,
rotary embeddings with HF's rotate_half (Llama 3's frequency scaling with
--rope-scaling llama3), grouped-query attention (HF's repeat_kv), explicit
causal attention (torch 1.13 has no F.scaled_dot_product_attention), SwiGLU
MLP (gate, up, down), no biases, an untied lm_head or, with --tie-embeddings,
the head tied to embed_tokens. Defaults are Llama 3.2 1B's sizes (16 layers,
hidden 2048, 32 heads, 8 kv-heads, ffn 8192, vocab 128256, tied, rope_theta
500000, llama3 scaling 32/1/4/8192). --config FILE takes the [model] sizes and
train.batch_size / train.seq_len from a kiln TOML config (flags given on the
command line still win), so the peer runs the model kiln runs.
Weights ~ N(0, 0.02) (HF's initializer_range), norms 1. AdamW lr 6e-4, betas
(0.9, 0.95), weight decay 0.1 on 2-D tensors and 0 on the RMSNorm weights.

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


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):  # HF's LlamaRMSNorm: in fp32, back to the input's dtype
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def inv_freq(hs, theta, scaling, factor, low, high, orig):
    f = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
    if scaling != "llama3":
        return f
    # HF's _compute_llama3_parameters
    low_wl, high_wl = orig / low, orig / high
    wl = 2 * math.pi / f
    f_llama = torch.where(wl > low_wl, f / factor, f)
    smooth = (orig / wl - low) / (high - low)
    smoothed = (1 - smooth) * f_llama / factor + smooth * f_llama
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(medium, smoothed, f_llama)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def repeat_kv(x, rep):  # HF's repeat_kv: (B, NKV, T, hs) -> (B, NKV * rep, T, hs)
    B, nkv, T, hs = x.shape
    if rep == 1:
        return x
    return x[:, :, None, :, :].expand(B, nkv, rep, T, hs).reshape(B, nkv * rep, T, hs)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, hs = a.n_embd, a.n_embd // a.n_head
        self.n_head, self.n_kv_head, self.hs = a.n_head, a.n_kv_head, hs
        self.input_layernorm = RMSNorm(C, a.norm_eps)
        self.q_proj = nn.Linear(C, a.n_head * hs, bias=False)
        self.k_proj = nn.Linear(C, a.n_kv_head * hs, bias=False)
        self.v_proj = nn.Linear(C, a.n_kv_head * hs, bias=False)
        self.o_proj = nn.Linear(a.n_head * hs, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C, a.norm_eps)
        self.gate_proj = nn.Linear(C, a.ffn_hidden, bias=False)
        self.up_proj = nn.Linear(C, a.ffn_hidden, bias=False)
        self.down_proj = nn.Linear(a.ffn_hidden, C, bias=False)

    def attn(self, x, cos, sin, mask):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # HF casts the table to the activations'
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, self.n_head * self.hs)
        return self.o_proj(y)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab_size, a.n_embd)
        self.layers = nn.ModuleList([Block(a) for _ in range(a.n_layer)])
        self.norm = RMSNorm(a.n_embd, a.norm_eps)
        self.lm_head = None if a.tie_embeddings else nn.Linear(a.n_embd, a.vocab_size, bias=False)
        hs = a.n_embd // a.n_head
        f = inv_freq(hs, a.rope_theta, a.rope_scaling, a.rope_factor, a.rope_low_freq_factor,
                     a.rope_high_freq_factor, a.rope_original_max_position)
        freqs = torch.outer(torch.arange(a.block_size, dtype=torch.float32), f)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mask = torch.tril(torch.ones(a.block_size, a.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, a.block_size, a.block_size), persistent=False)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:, :, :T, :T]
        x = self.embed_tokens(idx)
        for blk in self.layers:
            x = blk(x, cos, sin, mask)
        x = self.norm(x)
        logits = self.lm_head(x) if self.lm_head is not None else x @ self.embed_tokens.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


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


# kiln config keys ([model] and [train]) -> this script's options
CONFIG_KEYS = {
    ("model", "n_layer"): "n_layer", ("model", "n_head"): "n_head",
    ("model", "n_kv_head"): "n_kv_head", ("model", "n_embd"): "n_embd",
    ("model", "ffn_hidden"): "ffn_hidden", ("model", "vocab_size"): "vocab_size",
    ("model", "block_size"): "block_size", ("model", "norm_eps"): "norm_eps",
    ("model", "rope_theta"): "rope_theta", ("model", "rope_scaling"): "rope_scaling",
    ("model", "rope_factor"): "rope_factor",
    ("model", "rope_low_freq_factor"): "rope_low_freq_factor",
    ("model", "rope_high_freq_factor"): "rope_high_freq_factor",
    ("model", "rope_original_max_position"): "rope_original_max_position",
    ("model", "tie_embeddings"): "tie_embeddings",
    ("train", "batch_size"): "batch", ("train", "seq_len"): "seq",
}


def config_defaults(path):
    import tomllib  # Python 3.11
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    if cfg.get("model", {}).get("family") != "llama":
        sys.exit(f"{path}: model.family is not \"llama\"")
    out = {}
    for (section, key), dest in CONFIG_KEYS.items():
        if key in cfg.get(section, {}):
            out[dest] = cfg[section][key]
    if out.get("n_kv_head", 0) == 0:  # kiln: 0 means n_head
        out.pop("n_kv_head", None)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="a kiln TOML config with model.family = \"llama\": its "
                    "[model] sizes and train.batch_size/seq_len become the defaults")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=11, help="timed steps; the first is warm-up")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast(\"cpu\", dtype=torch.bfloat16) over forward and loss")
    ap.add_argument("--n-layer", type=int, default=16)
    ap.add_argument("--n-head", type=int, default=32)
    ap.add_argument("--n-kv-head", type=int, default=8)
    ap.add_argument("--n-embd", type=int, default=2048)
    ap.add_argument("--ffn-hidden", type=int, default=8192)
    ap.add_argument("--vocab-size", type=int, default=128256)
    ap.add_argument("--block-size", type=int, default=2048)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--rope-scaling", choices=["none", "llama3"], default="llama3")
    ap.add_argument("--rope-factor", type=float, default=32.0)
    ap.add_argument("--rope-low-freq-factor", type=float, default=1.0)
    ap.add_argument("--rope-high-freq-factor", type=float, default=4.0)
    ap.add_argument("--rope-original-max-position", type=int, default=8192)
    ap.add_argument("--tie-embeddings", type=int, choices=[0, 1], default=1)
    pre, _ = ap.parse_known_args()
    if pre.config:
        defaults = config_defaults(pre.config)
        if "tie_embeddings" in defaults:
            defaults["tie_embeddings"] = int(defaults["tie_embeddings"])
        # kiln's defaults for keys the config leaves out (model/config.h)
        for key, value in [("n_kv_head", None), ("rope_scaling", "none"), ("tie_embeddings", 0),
                           ("rope_theta", 10000.0), ("rope_factor", 8.0),
                           ("rope_original_max_position", 8192)]:
            defaults.setdefault(key, value)
        if defaults["n_kv_head"] is None:
            defaults["n_kv_head"] = defaults.get("n_head", ap.get_default("n_head"))
        ap.set_defaults(**defaults)
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first step is not counted)")
    if args.n_head % args.n_kv_head or args.n_embd % args.n_head:
        ap.error("--n-kv-head must divide --n-head, and --n-head divide --n-embd")
    if args.seq > args.block_size:
        ap.error("--seq must be at most --block-size")

    want = str(args.threads)
    have = os.environ.get("OPENBLAS_NUM_THREADS")
    if have != want:
        print(f"WARNING: OPENBLAS_NUM_THREADS is {have!r}, expected {want!r}. Debian's torch does fp32 "
              f"matmuls in the system BLAS, which ignores torch.set_num_threads; rerun as\n"
              f"  OPENBLAS_NUM_THREADS={want} {sys.executable} {' '.join(sys.argv)}",
              file=sys.stderr)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = Llama(args)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(p.numel() for p in model.parameters())
    B, T = args.batch, args.seq
    tokens = torch.randint(0, args.vocab_size, (B, T + 1))
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
    print(f"Llama {n_params / 1e6:.1f}M params, {args.dtype}, B={B} T={T}, threads={args.threads}, "
          f"blas={blas}: median {step_s * 1e3:.1f} ms/step over steps 2..{args.steps}, "
          f"{B * T / step_s:.1f} tokens/s", file=sys.stderr)
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__,
                      "step_ms": round(step_s * 1e3, 3),
                      "tokens_per_sec": round(B * T / step_s, 3),
                      "threads": args.threads, "blas": blas, "dtype": args.dtype,
                      "batch": B, "seq": T, "n_layer": args.n_layer, "n_embd": args.n_embd,
                      "n_params": n_params,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
