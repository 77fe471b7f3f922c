# ruff: noqa
"""A/B: HEAD's Gluon kernel vs the working tree's (3-bit key warps along the groups), k3v4_nc."""

import importlib
import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention import gluon_kernel as gk
from tq_triton.attention.plan import plan_config, plan_block_q

V = {
    "head": importlib.import_module("tq_triton.attention.gluon_kernel_head").gluon_attention_kernel,
    "new": gk.gluon_attention_kernel,
}
dev = torch.device("cuda")
preset = "turboquant_k3v4_nc"
for s in ["poc", "verify-32k"]:
    case = bench.build_case(bench.SHAPES[s], preset, dev)
    g = case.shape.q_heads // case.shape.kv_heads
    table = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
    cfgs = {"table": table}
    if s == "poc":
        cfgs = {
            **cfgs,
            **{f"g1s{sp}": replace(table, gluon=1, block_kv=64, kv_splits=sp, min_rows=16) for sp in (8, 16)},
        }
    for cn, cfg in cfgs.items():
        res, outs = {}, {}
        for _ in range(3):
            for name, k in V.items():
                gk.gluon_attention_kernel = k
                res.setdefault(name, []).append(
                    bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=200) * 1000
                )
                outs[name] = bench.run_tq(case, config=cfg).float().clone()
        gk.gluon_attention_kernel = V["new"]
        d = (outs["new"] - outs["head"]).abs().max().item()
        print(
            f"k3v4_nc {s:10} {cn:6} " + " ".join(f"{k}={min(v):.1f}" for k, v in res.items()) + f" us diff={d:.1e}",
            flush=True,
        )
