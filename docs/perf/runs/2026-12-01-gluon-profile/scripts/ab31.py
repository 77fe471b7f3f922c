# ruff: noqa
"""A/B in one process: the committed Gluon kernel (old, 4ed9380) vs the working tree's
(centroid pairs from the register table), k3v4_nc, the table's configs."""

import importlib
import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention import gluon_kernel as gk
from tq_triton.attention.plan import plan_config, plan_block_q

V = {
    "old": importlib.import_module("tq_triton.attention.gluon_kernel_head").gluon_attention_kernel,
    "new": gk.gluon_attention_kernel,
}
dev = torch.device("cuda")
preset = "turboquant_k3v4_nc"
for s in ["verify-32k", "decode-32k", "ragged", "poc"]:
    case = bench.build_case(bench.SHAPES[s], preset, dev)
    g = case.shape.q_heads // case.shape.kv_heads
    base = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
    if not base.gluon:
        base = replace(base, gluon=1, block_kv=64, kv_splits=16, min_rows=16)
    res, outs = {}, {}
    for _ in range(3):
        for name, k in V.items():
            gk.gluon_attention_kernel = k
            res.setdefault(name, []).append(bench.time_ms(lambda: bench.run_tq(case, config=base), warmup=10, rep=100))
            outs[name] = bench.run_tq(case, config=base).float().clone()
    gk.gluon_attention_kernel = V["new"]
    diff = (outs["new"] - outs["old"]).abs().max().item()
    print(f"k3v4_nc {s:11} " + " ".join(f"{k}={min(v):.4f}" for k, v in res.items()) + f" diff={diff:.2e}", flush=True)
