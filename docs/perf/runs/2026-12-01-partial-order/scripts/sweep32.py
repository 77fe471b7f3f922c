# ruff: noqa
"""split_budget on the H200: table vs budgets 1/2/4 with the table's splits and 32."""

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


def err(case, cfg):
    a = bench.run_tq(case, config=cfg).float()
    b = bench.run_tq(case, config=replace(cfg, split_budget=0)).float()
    return (a - b).abs().max().item()


for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
    for s in ["verify-32k", "ragged", "poc", "decode-32k"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        base = cfg_for(case, preset)
        row = [f"{preset[11:]:8} {s:10} table(g{base.gluon} b{base.block_kv} s{base.kv_splits}) {t(case, base):.4f}"]
        for sp in sorted({base.kv_splits, 32}):
            for bud in (1, 2, 4):
                c = replace(base, kv_splits=sp, split_budget=bud)
                row.append(f"s{sp}B{bud} {t(case, c):.4f} ({err(case, c):.1e})")
        print(" | ".join(row), flush=True)
