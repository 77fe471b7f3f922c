# ruff: noqa: B023, SIM115, UP031
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""Larger tiles: q8 shapes with 256-token tiles / fewer splits, and decode-32k with larger tiles."""

import json
import os
import sys

import torch

from tq_triton import bench
from tq_triton.tuning import AttentionConfig

SH = dict(bench.SHAPES)
SH["poc-g4"] = bench.Shape("poc-g4", batch=4, q_heads=16, kv_heads=4, head_dim=128, seq_len=8192, q_len=8)
SH["verify-g8"] = bench.Shape("verify-g8", batch=8, q_heads=64, kv_heads=8, head_dim=128, seq_len=32768, q_len=8)
PRESETS = ["turboquant_k3v4_nc", "turboquant_k8v4"]
Q8 = [
    dict(num_warps=w, block_kv=b, kv_splits=s)
    for (w, b, s) in [
        (4, 128, 16),
        (4, 256, 16),
        (8, 256, 16),
        (4, 256, 8),
        (4, 128, 8),
        (8, 128, 8),
        (8, 128, 16),
        (4, 64, 16),
    ]
]
Q1 = [
    dict(num_warps=w, block_kv=b, kv_splits=0, waves=wv)
    for (w, b) in [(1, 32), (1, 64), (2, 64), (2, 128), (4, 128), (4, 256)]
    for wv in (16, 64)
]
js = [(s, p, c) for s in ["verify-32k", "poc-g4", "ragged", "poc", "verify-g8"] for p in PRESETS for c in Q8]
js += [("decode-32k", p, c) for p in PRESETS for c in Q1]
phase = sys.argv[1]
if phase == "compile":
    js = js[int(sys.argv[2]) :: int(sys.argv[3])]
dev = torch.device("cuda")
cases, res = {}, []
for s, p, c in js:
    if (s, p) not in cases:
        cases.clear()
        torch.cuda.empty_cache()
        cases[(s, p)] = bench.build_case(SH[s], p, dev)
    case = cases[(s, p)]
    vw = 1 if (s == "decode-32k" and p == "turboquant_k3v4_nc") else 0
    cfg = AttentionConfig(num_stages=1, prefetch=1, value_acc=1, value_words=vw, **c)
    try:
        if phase == "compile":
            bench.run_tq(case, config=cfg)
            torch.cuda.synchronize()
            continue
        t = bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=40)
    except Exception as e:
        if phase == "time":
            print("ERR", s, p, c, str(e)[:80])
        continue
    res.append(dict(shape=s, preset=p, ms=t, **c))
if phase == "time":
    json.dump(res, open(os.environ["OUT"] + "/sweep15.json", "w"))
    for p in PRESETS:
        for s in ["verify-32k", "poc-g4", "ragged", "poc", "verify-g8", "decode-32k"]:
            rows = sorted([r for r in res if r["preset"] == p and r["shape"] == s], key=lambda r: r["ms"])
            print(
                p,
                s,
                [
                    (r["num_warps"], r["block_kv"], r["kv_splits"] or "w%d" % r.get("waves", 0), round(r["ms"], 4))
                    for r in rows[:5]
                ],
            )
