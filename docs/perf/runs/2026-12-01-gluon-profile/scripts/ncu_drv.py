# ruff: noqa
"""Run one tq attention config a few times (for ncu): argv preset shape gluon bkv splits."""

import sys
import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")
preset, shape, gluon, bkv, splits = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
case = bench.build_case(bench.SHAPES[shape], preset, dev)
g = case.shape.q_heads // case.shape.kv_heads
cfg = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
cfg = replace(cfg, gluon=gluon, block_kv=bkv, kv_splits=splits, min_rows=16)
print(cfg, flush=True)
for _ in range(4):
    bench.run_tq(case, config=cfg)
torch.cuda.synchronize()
