# ruff: noqa
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""Gluon one vs two buffers; merge kernel warps."""

import torch, triton
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q
from tq_triton.attention.kernel import merge_kernel

dev = torch.device("cuda")
for nq, hq, sp in [(32, 32, 16), (64, 32, 16), (32, 32, 32)]:
    part = torch.randn(nq * hq * sp * 128, device=dev)
    lse = torch.randn(nq * hq * sp, device=dev)
    out = torch.empty(nq, hq, 128, device=dev, dtype=torch.bfloat16)
    qsl = torch.arange(0, nq + 1, 8, device=dev, dtype=torch.int32)
    row = [f"merge nq {nq} hq {hq} splits {sp}:"]
    for w in (1, 2, 4, 8):
        f = lambda: merge_kernel[(nq, hq)](
            part,
            lse,
            out,
            qsl,
            qsl.numel() - 1,
            1,
            out.stride(0),
            out.stride(1),
            NUM_Q_HEADS=hq,
            NUM_SPLITS=sp,
            SPLITS_PAD=sp,
            D=128,
            num_warps=w,
        )
        row.append(f"w{w} {bench.time_ms(f, warmup=10, rep=100) * 1000:.1f}us")
    print(" ".join(row), flush=True)
plan = {
    "decode-32k": [(32, 0), (32, 16)],
    "verify-32k": [(32, 16), (64, 16)],
    "poc": [(32, 16), (64, 16)],
    "ragged": [(32, 32), (64, 32)],
}
for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
    for s, cfgs in plan.items():
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        base = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
        ref = bench.run_tq(case)
        row = [f"{preset[11:]:7} {s:11}"]
        for bkv, sp in cfgs:
            for gl_ in (1, 2):
                cfg = replace(base, gluon=gl_, block_kv=bkv, kv_splits=sp, min_rows=16, max_registers=0)
                try:
                    o = bench.run_tq(case, config=cfg)
                    torch.cuda.synchronize()
                    err = (o.float() - ref.float()).abs().max().item()
                    t = bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=80)
                    row.append(f"b{gl_} {bkv}/{sp}: {t:.4f} ({err:.0e})")
                except Exception as e:
                    row.append(f"b{gl_} {bkv}/{sp}: ERR {str(e)[:80]}")
        print("  ".join(row), flush=True)
