# ruff: noqa: B023, SIM115
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""q8 configs over verify-32k (32 rows), poc-g4 (32 rows), ragged (32 rows), poc (64 rows), verify-g8 (64 rows)."""

import json
import os
import sys

import torch

from tq_triton import bench
from tq_triton.tuning import AttentionConfig

SH = dict(bench.SHAPES)
SH["poc-g4"] = bench.Shape("poc-g4", batch=4, q_heads=16, kv_heads=4, head_dim=128, seq_len=8192, q_len=8)
SH["verify-g8"] = bench.Shape("verify-g8", batch=8, q_heads=64, kv_heads=8, head_dim=128, seq_len=32768, q_len=8)
SHAPES = ["verify-32k", "poc-g4", "ragged", "poc", "verify-g8"]
PRESETS = ["turboquant_k3v4_nc", "turboquant_k8v4"]
CFGS = [(w, b, s) for w in (2, 4, 8) for b in (32, 64, 128) for s in (16, 32)]
js = [(s, p, c) for s in SHAPES for p in PRESETS for c in CFGS]
phase = sys.argv[1]
if phase == "compile":
    js = js[int(sys.argv[2]) :: int(sys.argv[3])]
dev = torch.device("cuda")
cases, res = {}, []
for s, p, (w, bkv, sp) in js:
    if (s, p) not in cases:
        cases.clear()
        torch.cuda.empty_cache()
        cases[(s, p)] = bench.build_case(SH[s], p, dev)
    case = cases[(s, p)]
    cfg = AttentionConfig(block_kv=bkv, num_warps=w, num_stages=1, prefetch=1, kv_splits=sp, value_acc=1)
    try:
        if phase == "compile":
            bench.run_tq(case, config=cfg)
            torch.cuda.synchronize()
            continue
        t = bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=40)
    except Exception as e:
        if phase == "time":
            print("ERR", s, p, w, bkv, sp, str(e)[:80])
        continue
    res.append(dict(shape=s, preset=p, w=w, bkv=bkv, sp=sp, ms=t))
if phase == "time":
    json.dump(res, open(os.environ["OUT"] + "/sweep14.json", "w"))
    for p in PRESETS:
        for s in SHAPES:
            rows = sorted([r for r in res if r["preset"] == p and r["shape"] == s], key=lambda r: r["ms"])
            print(p, s, [(r["w"], r["bkv"], r["sp"], round(r["ms"], 4)) for r in rows[:6]])
