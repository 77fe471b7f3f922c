# ruff: noqa: B023
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""value_words at the new q8 entries (one interleaved pair of rounds)."""

from dataclasses import replace

import torch

from tq_triton import bench
from tq_triton.attention.plan import plan_config

dev = torch.device("cuda")
for s in ["verify-32k", "poc"]:
    for p in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], p, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        base = plan_config(dev, p, 8, 8 * g)
        ts = {0: [], 1: []}
        for _ in range(2):
            for vw in (0, 1):
                cfg = replace(base, value_words=vw)
                ts[vw].append(bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=60))
        a, b = sum(ts[0]) / 2, sum(ts[1]) / 2
        print(
            f"{s:11} {p:20} bkv {base.block_kv} warps {base.num_warps}: vw0 {a:.4f} vw1 {b:.4f} ms  ratio {b / a:.3f}"
        )
