# ruff: noqa
"""poc / verify-32k: table vs gluon 1/3, value_words, bf16_partials; fastest bf16 in the same process."""

import sys
import torch
from dataclasses import replace
from tq_triton import bench
from tq_triton.attention.plan import plan_config, plan_block_q

dev = torch.device("cuda")
shapes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["poc", "verify-32k"]
for s in shapes:
    dcase = bench.build_case(bench.SHAPES[s], "turboquant_k8v4", dev, dense=True)
    best = None
    for label, call, _rows in bench.bf16_candidates(dcase):
        try:
            t = min(bench.time_ms(call, warmup=10, rep=200) for _ in range(3)) * 1000
        except Exception as e:  # noqa
            continue
        if best is None or t < best[1]:
            best = (label, t)
    print(f"{s:10} bf16 fastest {best[0]} {best[1]:.1f} us", flush=True)
    del dcase
    for preset in ["turboquant_k3v4_nc", "turboquant_k8v4"]:
        case = bench.build_case(bench.SHAPES[s], preset, dev)
        g = case.shape.q_heads // case.shape.kv_heads
        t = plan_config(dev, preset, case.max_query_len, plan_block_q(g, case.max_query_len) * g)
        cfgs = {"table": t, "t+bf16p": replace(t, bf16_partials=1)}
        if t.gluon == 0:
            cfgs["t+vw"] = replace(t, value_words=1)
            cfgs["t+vw+bf16p"] = replace(t, value_words=1, bf16_partials=1)
        if s == "poc":
            for gl in (1, 3):
                for sp in (8, 16):
                    cfgs[f"g{gl}s{sp}"] = replace(t, gluon=gl, block_kv=64, kv_splits=sp, min_rows=16, value_words=0)
            cfgs["g3s16+bf16p"] = replace(cfgs["g3s16"], bf16_partials=1)
            cfgs["g1s16+bf16p"] = replace(cfgs["g1s16"], bf16_partials=1)
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
        ref = outs["table"]
        for cn in cfgs:
            d = (outs[cn] - ref).abs().max().item() if cn in outs else float("nan")
            print(f"{s:10} {preset[11:]:8} {cn:12} {min(res[cn]):8.1f} us  diff {d:.1e}", flush=True)
