# ruff: noqa
"""split_budget with each request's tiles dealt out evenly, against the table (16 splits) and 8 splits,
at verify-32k and ragged (they share the q8 entry); one process."""

import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")
for s in ["verify-32k", "ragged"]:
    for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        t = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
        cfgs = {"table": t, "s8": replace(t, kv_splits=8), "s32": replace(t, kv_splits=32)}
        for b in (3, 4, 6):
            for sp in (16, 32):
                cfgs[f"B{b}s{sp}"] = replace(t, split_budget=b, kv_splits=sp)
        res, outs = {}, {}
        for _ in range(3):
            for cn, cfg in cfgs.items():
                try:
                    res.setdefault(cn, []).append(
                        bench.time_ms(lambda: bench.run_tq(case, config=cfg), warmup=10, rep=200) * 1000
                    )
                    outs[cn] = bench.run_tq(case, config=cfg).float().clone()
                except Exception as e:
                    res[cn] = [float("nan")]
                    print(cn, "failed", repr(e)[:200], flush=True)
        print(
            f"{s:10} {preset[11:]:8} "
            + " | ".join(
                f"{cn} {min(res[cn]):.1f}"
                + (f" d{(outs[cn] - outs['table']).abs().max().item():.0e}" if cn in outs else "")
                for cn in cfgs
            ),
            flush=True,
        )
