# ruff: noqa
"""gluon 3: split counts at poc, 64-row tiles at verify-32k and ragged, against the table (one process)."""

import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")
for s in ["poc", "verify-32k", "ragged"]:
    for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        t = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
        cfgs = {"table": t}
        g3 = replace(t, gluon=3, block_kv=64, num_warps=4, value_words=0, bf16_partials=0)
        if s == "poc":
            for sp in (12, 16, 24, 32):
                cfgs[f"g3s{sp}"] = replace(g3, kv_splits=sp, min_rows=16)
        else:
            for sp in (8, 16, 32):
                cfgs[f"g3m64s{sp}"] = replace(g3, kv_splits=sp, min_rows=64)
            cfgs["g1m64s16"] = replace(g3, gluon=1, kv_splits=16, min_rows=64)
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
        print(f"{s:10} {preset[11:]:8} table {t}", flush=True)
        for cn in cfgs:
            d = (outs[cn] - outs["table"]).abs().max().item() if cn in outs else float("nan")
            print(f"{s:10} {preset[11:]:8} {cn:12} {min(res[cn]):8.1f} us  diff {d:.1e}", flush=True)
