# ruff: noqa
"""HEAD's Gluon kernel vs the working tree's (empty splits skipped), table config, k8v4/k3v4_nc verify-32k and ragged."""

import importlib
import torch
from tq_triton import bench
from tq_triton.attention import gluon_kernel as gk
from tq_triton.attention.plan import plan_config, plan_block_q

V = {
    "head": importlib.import_module("tq_triton.attention.gluon_kernel_head").gluon_attention_kernel,
    "new": gk.gluon_attention_kernel,
}
dev = torch.device("cuda")
for s, preset in [
    ("verify-32k", "turboquant_k8v4"),
    ("ragged", "turboquant_k8v4"),
    ("verify-32k", "turboquant_k3v4_nc"),
]:
    case = bench.build_case(bench.SHAPES[s], preset, dev)
    res = {}
    for _ in range(3):
        for name, k in V.items():
            gk.gluon_attention_kernel = k
            res.setdefault(name, []).append(bench.time_ms(lambda: bench.run_tq(case), warmup=10, rep=100) * 1000)
    gk.gluon_attention_kernel = V["new"]
    print(f"{s:10} {preset[11:]:8} " + " ".join(f"{k}={min(v):.1f}" for k, v in res.items()), flush=True)
