# ruff: noqa
"""poc: GPU time per kernel (torch.profiler, eager) and CUDA-graph time per call."""

import torch
from dataclasses import replace
from torch.profiler import profile, ProfilerActivity
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")


def cfg_for(case, preset):
    g = case.shape.q_heads // case.shape.kv_heads
    return plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)


def kernels(fn, n=50):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    res = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0 and e.count >= n:
            res.append(f"{e.key[:28]}:{t / e.count:.1f}us")
    return " ".join(res)


for s in ["poc", "verify-32k"]:
    for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev, dense=(preset == "turboquant_k8v4"))
        base = cfg_for(case, preset)
        variants = [("table", base)]
        if s == "poc":
            variants += [
                (f"g{g}s{sp}", replace(base, gluon=g, kv_splits=sp, block_kv=64 if g else base.block_kv))
                for g in (0, 1)
                for sp in (4, 8, 16, 32)
            ]
        for name, c in variants:
            gt = bench.time_ms(lambda: bench.run_tq(case, config=c), warmup=10, rep=200) * 1000
            print(
                f"{preset[11:]:8} {s:10} {name:6} graph {gt:6.1f}us | {kernels(lambda: bench.run_tq(case, config=c))}",
                flush=True,
            )
        if preset == "turboquant_k8v4":
            for label, fn, _ in bench.bf16_candidates(case):
                if "math" in label or "+mask" in label:
                    continue
                try:
                    gt = bench.time_ms(fn, warmup=10, rep=200) * 1000
                    print(f"bf16 {s:10} {label[:34]:34} graph {gt:6.1f}us | {kernels(fn)}", flush=True)
                except Exception as exc:
                    print(f"bf16 {label}: {type(exc).__name__}")
