# ruff: noqa
"""A/B in one process: HEAD's Gluon kernel (old) vs the working tree's (new), the table's
configs, plus verify with a 200-register cap; max abs difference new vs old."""

import importlib
import sys
import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention import gluon_kernel as gk
from tq_triton.attention.plan import plan_config, plan_block_q

old = importlib.import_module("tq_triton.attention.gluon_kernel_old")
V = {
    "old": old.gluon_attention_kernel,
    "v1": importlib.import_module("tq_triton.attention.gluon_kernel_v1").gluon_attention_kernel,
    "new": gk.gluon_attention_kernel,
    "v2": importlib.import_module("tq_triton.attention.gluon_kernel_v2").gluon_attention_kernel,
}
NEW = gk.gluon_attention_kernel
dev = torch.device("cuda")


def cfg_for(case, preset):
    g = case.shape.q_heads // case.shape.kv_heads
    return plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)


def use(k):
    gk.gluon_attention_kernel = k


def t(case, cfg):
    return bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=100)


rows = []
for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
    for s in ["verify-32k", "poc", "decode-32k", "ragged"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        base = cfg_for(case, preset)
        if not base.gluon:
            base = replace(base, gluon=1, block_kv=64, kv_splits=16, min_rows=16) if s == "poc" else base
        if not base.gluon:
            continue
        use(old.gluon_attention_kernel)
        o_old = bench.run_tq(case, config=base).clone()
        res = {}
        if not cfg_for(case, preset).gluon:
            res["table"] = [t(case, cfg_for(case, preset))]
        for rep_ in range(3):
            for name, k in V.items():
                use(k)
                res.setdefault(name, []).append(t(case, base))
        use(NEW)
        o_new = bench.run_tq(case, config=base)
        diff = (o_new.float() - o_old.float()).abs().max().item()
        line = (
            f"{preset[11:]:8} {s:11} g{base.gluon} bkv{base.block_kv} sp{base.kv_splits} "
            + " ".join(f"{k}={min(v):.4f}" for k, v in res.items())
            + f" diff={diff:.2e}"
        )
        print(line, flush=True)
