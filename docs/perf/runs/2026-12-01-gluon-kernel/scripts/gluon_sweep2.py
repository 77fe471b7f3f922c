# ruff: noqa
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""Gluon: register cap x splits x tile sweep; per-kernel profile of poc/verify."""

import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")


def cfg_for(case, preset):
    g = case.shape.q_heads // case.shape.kv_heads
    return plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)


# per-kernel device times
from torch.profiler import profile, ProfilerActivity

for preset, s, kw in [
    ("turboquant_k8v4", "poc", dict(gluon=1, block_kv=64, kv_splits=16, min_rows=16)),
    ("turboquant_k3v4_nc", "poc", {}),
    ("turboquant_k3v4_nc", "poc", dict(gluon=1, block_kv=64, kv_splits=16, min_rows=16)),
    ("turboquant_k3v4_nc", "verify-32k", dict(gluon=1, block_kv=64, kv_splits=16, min_rows=16)),
]:
    case = bench.build_case(bench.SHAPES[s], preset, dev)
    cfg = replace(cfg_for(case, preset), **kw)
    for _ in range(5):
        bench.run_tq(case, config=cfg)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            bench.run_tq(case, config=cfg)
        torch.cuda.synchronize()
    evs = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            evs.setdefault(e.name[:40], []).append(
                e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            )
    print(preset[11:], s, kw, {k: round(sum(v) / len(v), 1) for k, v in evs.items()})
for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
    for s in ["decode-32k", "verify-32k", "poc", "ragged"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        base = cfg_for(case, preset)
        t0 = bench.time_ms(lambda: bench.run_tq(case), warmup=10, rep=60)
        row = [f"{preset[11:]:7} {s:11} table {t0:.4f}"]
        bkvs = (32,) if s.startswith("decode") else (32, 64)
        spl = (16,) if s.startswith("decode") else (16, 32)
        for bkv in bkvs:
            for sp in spl:
                for reg in (0, 128, 168):
                    cfg = replace(base, gluon=1, block_kv=bkv, kv_splits=sp, min_rows=16, max_registers=reg)
                    try:
                        t = bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=60)
                        row.append(f"g{bkv}/{sp}/r{reg}: {t:.4f}")
                    except Exception as e:
                        row.append(f"g{bkv}/{sp}/r{reg}: ERR {str(e)[:60]}")
        print("  ".join(row), flush=True)
