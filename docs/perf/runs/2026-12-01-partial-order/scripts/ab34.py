# ruff: noqa
"""Ablation of the Gluon kernel's fixed costs at poc (and verify-32k), one process."""

import importlib
import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention import gluon_kernel as gk
from tq_triton.attention.plan import plan_config, plan_block_q

names = ["head", "early", "nostore", "nohad", "noloop"]
V = {"base": gk.gluon_attention_kernel}
V |= {n: importlib.import_module(f"tq_triton.attention.gluon_kernel_{n}").gluon_attention_kernel for n in names}
dev = torch.device("cuda")
for s in ["poc", "verify-32k"]:
    for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        cfg = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
        if s == "poc":
            cfg = replace(cfg, gluon=1, block_kv=64, kv_splits=16, min_rows=16)
        res, outs = {}, {}
        for _ in range(3):
            for n, k in V.items():
                if n == "nohad" and "k8" in preset:
                    continue
                gk.gluon_attention_kernel = k
                res.setdefault(n, []).append(
                    bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=200) * 1000
                )
                outs[n] = bench.run_tq(case, config=cfg).float().clone()
        gk.gluon_attention_kernel = V["base"]
        d = (outs["early"] - outs["base"]).abs().max().item()
        print(
            f"{preset[11:]:8} {s:10} "
            + " ".join(f"{k}={min(v):.1f}" for k, v in res.items())
            + f" us; early diff {d:.1e}",
            flush=True,
        )
