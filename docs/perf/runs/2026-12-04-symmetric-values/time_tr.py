"""Time token-rows configurations against the H200 table's entry and the fastest bf16 kernel,
one run. Usage: ``python3 time_tr.py SHAPE[,SHAPE] PRESET[,PRESET] BKV:SPLITS:WAVES[:NORM_MMA[:PAIRS[:INT]]] ...``
(each 0 or 1, default 0: ``AttentionConfig.norm_mma``, ``selector_pairs`` and ``int_values``;
a knob a preset does not use changes nothing). Prints one line per
configuration with its largest difference from the table kernel's output, and writes
time_tr.json."""

from __future__ import annotations

import dataclasses
import json
import sys

import torch

from tq_triton import bench
from tq_triton.device import device_facts
from tq_triton.tuning import attention_config_for

dev = torch.device("cuda")
facts = device_facts(dev)
rows = []
shapes = sys.argv[1].split(",")
presets = sys.argv[2].split(",")
configs = [tuple(int(x) for x in c.split(":")) for c in sys.argv[3:]]
for shape_name in shapes:
    shape = bench.SHAPES[shape_name]
    best_bf16 = None
    for preset in presets:
        case = bench.build_case(shape, preset, dev, dense=best_bf16 is None)
        if best_bf16 is None:
            times = []
            for label, call, _ in bench.bf16_candidates(case):
                try:
                    times.append((bench.time_ms(call), label))
                except Exception as exc:
                    print("bf16", label, "failed", type(exc).__name__)
            best_bf16 = min(times)
            print(f"{shape_name} bf16 {best_bf16[1]} {best_bf16[0]:.4f} ms", flush=True)
            case.dense_k = case.dense_v = None
        out = torch.empty_like(case.query)
        ref = bench.run_tq(case).float()
        t_table = bench.time_ms(lambda case=case, out=out: bench.run_tq(case, out=out))
        rows.append(dict(shape=shape_name, preset=preset, cfg="table", ms=t_table, bf16=best_bf16[0]))
        print(f"{shape_name} {preset} table {t_table:.4f} ms ({best_bf16[0] / t_table:.2f}x bf16)", flush=True)
        base = attention_config_for(facts.name, preset, shape.q_len, 16, shape.head_dim)
        for c in configs:
            bkv, splits, waves = c[:3]
            norm_mma, pairs, int_values = [*c[3:], 0, 0, 0][:3]
            cfg = dataclasses.replace(
                base,
                gluon=1,
                token_rows=1,
                block_kv=bkv,
                kv_splits=splits,
                waves=waves,
                split_budget=0,
                skip_empty=0,
                norm_mma=norm_mma,
                selector_pairs=pairs,
                int_values=int_values,
            )
            label = f"bkv{bkv} splits{splits} waves{waves} norm_mma{norm_mma} pairs{pairs} int{int_values}"
            try:
                got = bench.run_tq(case, config=cfg).float()
                err = (got - ref).abs().max().item()
                t = bench.time_ms(lambda cfg=cfg, case=case, out=out: bench.run_tq(case, out=out, config=cfg))
            except Exception as exc:
                print(shape_name, preset, label, "failed", repr(exc)[:300], flush=True)
                continue
            knobs = dict(
                block_kv=bkv,
                kv_splits=splits,
                waves=waves,
                norm_mma=norm_mma,
                selector_pairs=pairs,
                int_values=int_values,
            )
            rows.append(dict(shape=shape_name, preset=preset, cfg=knobs, ms=t, err=err, bf16=best_bf16[0]))
            print(
                f"{shape_name} {preset} tr {label}: {t:.4f} ms "
                f"({t_table / t:.2f}x table, {best_bf16[0] / t:.2f}x bf16) maxdiff {err:.2e}",
                flush=True,
            )
with open("time_tr.json", "w") as f:
    json.dump(rows, f, indent=1)
