# ruff: noqa
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""Gluon kernel timing, both presets: table vs gluon at 32/64-token tiles and 0/16/32 splits."""

import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")
for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
    for s in ["decode-32k", "verify-32k", "poc", "ragged"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        base = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
        ref = bench.run_tq(case)
        t0 = bench.time_ms(lambda: bench.run_tq(case), warmup=10, rep=60)
        row = [f"{preset[11:]:7} {s:11} table {t0:.4f}"]
        for bkv in (32, 64):
            for sp in (0, 16, 32):
                cfg = replace(base, gluon=1, block_kv=bkv, kv_splits=sp, min_rows=16)
                try:
                    o = bench.run_tq(case, config=cfg)
                    torch.cuda.synchronize()
                    err = (o.float() - ref.float()).abs().max().item()
                    t = bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=60)
                    row.append(f"g{bkv}/{sp}: {t:.4f} ({err:.0e})")
                except Exception as e:
                    row.append(f"g{bkv}/{sp}: ERR {str(e)[:80]}")
        print("  ".join(row), flush=True)
