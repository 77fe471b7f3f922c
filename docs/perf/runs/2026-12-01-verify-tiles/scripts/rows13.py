# ruff: noqa: B023
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""Does the best warp count follow the tile rows? Two more q8 shapes: poc with 4 q heads per kv
head (32 rows) and verify-32k with 8 (64 rows). Phases: compile K N | time."""

import sys

import torch

from tq_triton import bench
from tq_triton.tuning import AttentionConfig

SH = {
    "poc-g4": bench.Shape("poc-g4", batch=4, q_heads=16, kv_heads=4, head_dim=128, seq_len=8192, q_len=8),
    "verify-g8": bench.Shape("verify-g8", batch=8, q_heads=64, kv_heads=8, head_dim=128, seq_len=32768, q_len=8),
}
CFGS = [(2, 32, 0, 16), (2, 64, 0, 16), (2, 32, 32, 64), (4, 64, 32, 64), (4, 32, 32, 64)]
PRESETS = ["turboquant_k3v4_nc", "turboquant_k8v4"]
js = [(s, p, c) for s in SH for p in PRESETS for c in CFGS]
phase = sys.argv[1]
if phase == "compile":
    js = js[int(sys.argv[2]) :: int(sys.argv[3])]
dev = torch.device("cuda")
cases = {}
for s, p, (w, bkv, sp, wv) in js:
    if (s, p) not in cases:
        cases.clear()
        torch.cuda.empty_cache()
        cases[(s, p)] = bench.build_case(SH[s], p, dev)
    case = cases[(s, p)]
    cfg = AttentionConfig(block_kv=bkv, num_warps=w, num_stages=1, prefetch=1, kv_splits=sp, waves=wv, value_acc=1)
    if phase == "compile":
        bench.run_tq(case, config=cfg)
        torch.cuda.synchronize()
        continue
    t = bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=60)
    print(f"{s:10} {p:20} warps {w} block_kv {bkv:3} splits {sp:2} waves {wv:2}  {t:.4f} ms")
