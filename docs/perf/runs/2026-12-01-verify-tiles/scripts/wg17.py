# ruff: noqa: B023, E501
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""64-row tiles (Hopper wgmma) for verify-32k and decode-32k: max_query_len hint 16 pads the tile."""

import sys

import torch

from tq_triton import bench
from tq_triton.attention import attention
from tq_triton.tuning import AttentionConfig

dev = torch.device("cuda")
C = {
    "verify-32k": [(4, 64, 16, 0), (4, 128, 16, 0), (8, 128, 16, 0), (4, 256, 16, 0)],
    "decode-32k": [(4, 64, 0, 16), (4, 128, 0, 16), (4, 128, 0, 64), (8, 128, 0, 16)],
}
phase = sys.argv[1]
for s, cfgs in C.items():
    for p in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], p, dev)
        args = (case.query, case.kv_cache, case.block_table, case.seq_lens, case.query_start_loc, p, case.scale)
        ref = bench.run_tq(case)
        base = bench.time_ms(lambda: bench.run_tq(case), warmup=10, rep=60) if phase == "time" else 0
        for w, b, sp, wv in cfgs:
            cfg = AttentionConfig(
                num_warps=w, block_kv=b, kv_splits=sp, waves=wv or 4, num_stages=1, prefetch=1, value_acc=1
            )

            def fn():
                return attention(*args, config=cfg, max_query_len=16)

            try:
                o = fn()
                torch.cuda.synchronize()
                if phase != "time":
                    continue
                err = (o.float() - ref.float()).abs().max().item()
                t = bench.time_ms(fn, warmup=10, rep=60)
                print(
                    f"{s:10} {p:20} table {base:.4f}  64-row tiles w{w} bkv{b} sp{sp} wv{wv}: {t:.4f} ms  max|diff| {err:.2e}"
                )
            except Exception as e:
                if phase == "time":
                    print(s, p, w, b, "ERR", str(e)[:100])
