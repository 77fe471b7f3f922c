# ruff: noqa
"""Gluon kernel after the per-tile barrier removal: table vs nearby launch configs."""

import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")


def cfg_for(case, preset):
    g = case.shape.q_heads // case.shape.kv_heads
    return plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)


def t(case, cfg):
    return min(bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=100) for _ in range(2))


G = dict(gluon=1, min_rows=16)
plan = {
    "verify-32k": [dict(G, block_kv=b, kv_splits=s, gluon=g) for b in (32, 64) for s in (8, 16) for g in (1, 2)],
    "poc": [dict(G, block_kv=64, kv_splits=s, gluon=g) for s in (8, 16, 32) for g in (1, 2)],
    "decode-32k": [dict(G, block_kv=32, kv_splits=s) for s in (0, 16)],
    "ragged": [dict(G, block_kv=b, kv_splits=s) for b in (32, 64) for s in (16, 32)],
}
for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
    for s, kws in plan.items():
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        base = cfg_for(case, preset)
        row = [f"{preset[11:]:8} {s:10} table(g{base.gluon} b{base.block_kv} s{base.kv_splits}) {t(case, base):.4f}"]
        for kw in kws:
            row.append(f"g{kw['gluon']}b{kw['block_kv']}s{kw['kv_splits']} {t(case, replace(base, **kw)):.4f}")
        print(" | ".join(row), flush=True)
