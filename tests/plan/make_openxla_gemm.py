#!/usr/bin/env python3
"""Extracts the measured BF16 GEMM rates kiln's gemm_shape_test compares with.

OpenXLA keeps a table of measured matmul rates per GPU (M, N, K each a power of two from 256 to
4096) in xla/service/gpu/model/matmul_interpolator_data.h. This script reads
that file (as in ROCm/xla at ea2c45f2ca, 2026-07-31) and writes, for the single (b = 1) products
of the three GPUs kiln's catalog has parts for (sm_90: H100, sm_100_B200: B200, gfx942: MI300X),
the bf16 x bf16 -> bf16 rate in TFLOP/s of every shape whose dimensions are all at least 2048
(the transformer blocks' sizes), as the C++ initializers tests/plan/gemm_shape_test.cpp cites.

    python3 tests/plan/make_openxla_gemm.py path/to/matmul_interpolator_data.h
"""
import re
import sys

GPUS = ("sm_90", "sm_100_B200", "gfx942")


def main(path):
    text = open(path, encoding="utf-8").read()
    keys = [(m.start(), m.group(1)) for m in re.finditer(r'\n  entries \{\n    key: "([^"]+)"', text)]
    for i, (start, gpu) in enumerate(keys):
        if gpu not in GPUS:
            continue
        end = keys[i + 1][0] if i + 1 < len(keys) else len(text)
        seen = set()
        for entry in re.split(r"entries \{", text[start:end])[2:]:
            field = {f: re.search(r"\b%s: (\d+)" % f, entry) for f in "bmnk"}
            rate = re.search(r'key: "bf16xbf16->bf16"\s+value: ([0-9.e+]+)', entry)
            if not field["m"] or not rate:
                continue
            b = int(field["b"].group(1)) if field["b"] else 1
            m, n, k = (int(field[f].group(1)) for f in "mnk")
            if b != 1 or (m, n, k) in seen:
                continue
            seen.add((m, n, k))
            if min(m, n, k) >= 2048:
                print(f'    {{"{gpu}", {m}, {n}, {k}, {float(rate.group(1)) / 1e12:.1f}}},')
        if len(seen) != 125:
            sys.exit(f"{gpu}: expected 125 shapes (5 x 5 x 5), found {len(seen)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
