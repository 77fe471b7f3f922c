# ruff: noqa
"""Empty kv splits skipped: the table against split_budget 4 (16 splits) and 8 fixed splits, verify-32k and ragged."""

import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")
for s in ["verify-32k", "ragged"]:
    for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        t = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
        cfgs = {"table": t, "s8": replace(t, kv_splits=8), "B4s16": replace(t, split_budget=4)}
        res = {}
        for _ in range(2):
            for cn, cfg in cfgs.items():
                res.setdefault(cn, []).append(
                    bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=100) * 1000
                )
        print(f"{s:10} {preset[11:]:8} " + " | ".join(f"{cn} {min(v):.1f}" for cn, v in res.items()), flush=True)
