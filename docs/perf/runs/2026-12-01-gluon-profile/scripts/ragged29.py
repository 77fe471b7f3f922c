# ruff: noqa
"""The new verify entries (8 kv splits) on the ragged batch, against 16 and 32."""

import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")
for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
    case = bench.build_case(bench.SHAPES["ragged"], preset, dev)
    g = case.shape.q_heads // case.shape.kv_heads
    base = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
    row = [f"{preset[11:]:8} ragged table(b{base.block_kv} s{base.kv_splits})"]
    for s in (8, 16, 32):
        cfg = replace(base, kv_splits=s)
        row.append(
            f"s{s} {min(bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=100) for _ in range(2)):.4f}"
        )
    print(" | ".join(row), flush=True)
