#!/usr/bin/env python3
"""Writes a synthetic run directory for timing `kiln report` on a long run.

usage: bench/make_metrics.py STEPS RANKS OUT_DIR

OUT_DIR/metrics.jsonl gets one run_start record and STEPS train records with every field the
trainer writes, including per-rank step times for RANKS ranks (about 530 bytes a step at 8).
"""
import json
import math
import os
import random
import sys

steps, ranks, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.makedirs(out, exist_ok=True)
rng = random.Random(0)
t0 = 1795000000.0
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"type": "run_start", "time": t0, "step": 0, "world": ranks,
                        "resumed_from": None, "config": {"train": {"steps": steps}},
                        "host": "node01"}) + "\n")
    for s in range(1, steps + 1):
        f.write(json.dumps({
            "type": "train", "step": s,
            "loss": 2 + 8 * math.exp(-s / (steps / 10)) + rng.random() * 0.1,
            "lr": 3e-4, "grad_norm": 1.0 + rng.random(), "tokens": s * 524288,
            "tokens_per_sec": 120000.0 + rng.random() * 1000, "step_ms": 4200.0 + rng.random() * 100,
            "mfu": 0.41, "comm_wait_ms": 120.5, "forward_ms": 1300.2, "backward_ms": 2600.1,
            "optimizer_ms": 80.3, "data_ms": 1.2, "skipped": False, "time": t0 + s * 4.2,
            "rank_step_ms": [4100.0 + rng.random() * 100 for _ in range(ranks)]}) + "\n")
