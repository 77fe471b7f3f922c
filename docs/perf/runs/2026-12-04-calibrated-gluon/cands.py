"""The calibrated formats tq_k4v3 and tq_k4v4 on the Gluon kernel, timed on the H200 in one
process at every named shape of ``tq bench``: the shipped table's entry ("table"), and the
configuration the table gives the vLLM format whose keys the calibrated format shares
("as-4bit_nc"; "as-k3v4_nc" too for tq_k4v3, the vLLM format of its size), forced on the
calibrated format. With ``OLD_TABLE_DIR`` (a folder holding an earlier table), also that table's
entry ("old"); with ``B32=1``, the table's entry with 32-token tiles at verify-32k ("b32").
Beside them, those vLLM formats' own table times and the fastest bf16 kernel.

    python3 cands.py OUT.json [SHAPE,...]

Medians of CUDA-graph replays (``bench.time_ms``). Results are written to OUT.json after every
shape, so a run stopped at its time limit keeps what it measured.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, replace

import torch

from tq_triton import bench
from tq_triton.attention.plan import longest_query, next_pow2, plan_block_q
from tq_triton.device import device_facts
from tq_triton.tuning import attention_config_for, clear_cache

SHAPES = ("decode-32k", "verify-32k-q2", "verify-32k-q4", "verify-32k", "verify-32k-q16", "poc", "decode-d64", "ragged")
CALIBRATED = {"tq_k4v3": ("turboquant_4bit_nc", "turboquant_k3v4_nc"), "tq_k4v4": ("turboquant_4bit_nc",)}
PEERS = ("turboquant_4bit_nc", "turboquant_k3v4_nc")


def table_config(case: bench.Case, preset: str):
    """The configuration the tuning table gives ``preset`` for the case's launch (as
    ``plan.plan_attention`` looks it up)."""
    facts = device_facts(case.query.device)
    nq, hq, d = case.query.shape
    hk = case.kv_cache.shape[2]
    longest = longest_query(nq, case.seq_lens.numel(), case.max_query_len)
    rows = plan_block_q(next_pow2(hq // hk), longest) * next_pow2(hq // hk)
    return attention_config_for(facts.name, preset, longest, rows, d)


def old_config(case: bench.Case, preset: str):
    """:func:`table_config` from the table in ``OLD_TABLE_DIR`` (a user table, which comes first)."""
    saved = os.environ.get("TQ_TUNING_DIR")
    os.environ["TQ_TUNING_DIR"] = os.environ["OLD_TABLE_DIR"]
    clear_cache()
    try:
        return table_config(case, preset)
    finally:
        if saved is None:
            del os.environ["TQ_TUNING_DIR"]
        else:
            os.environ["TQ_TUNING_DIR"] = saved
        clear_cache()


def main() -> None:
    out_path = sys.argv[1]
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else SHAPES
    dev = torch.device("cuda")
    results: list[dict] = []
    for name in names:
        shape = bench.SHAPES[name]
        dense = bench.build_case(shape, PEERS[0], dev, seed=0, dense=True)
        fn, label = bench.sdpa_bf16(dense)
        bf16 = bench.time_ms(fn)
        del dense
        torch.cuda.empty_cache()
        print(f"== {name}: bf16 {label} {bf16 * 1e3:.1f} us", flush=True)
        for preset in PEERS:
            case = bench.build_case(shape, preset, dev, seed=0)
            t = bench.time_ms(lambda case=case: bench.run_tq(case))
            results.append({"shape": name, "preset": preset, "bf16_ms": bf16, "bf16": label, "ms": {"table": t}})
            print(f"   {preset:20} table {t * 1e3:8.1f} us ({bf16 / t:.2f}x bf16)", flush=True)
            del case
        for preset, like in CALIBRATED.items():
            t0 = time.time()
            case = bench.build_case(shape, preset, dev, seed=0)
            configs = {f"as-{p.removeprefix('turboquant_')}": table_config(case, p) for p in like}
            if os.environ.get("OLD_TABLE_DIR"):
                configs["old"] = old_config(case, preset)
            if os.environ.get("B32") == "1" and name == "verify-32k":
                configs["b32"] = replace(table_config(case, preset), block_kv=32)
            times = {"table": bench.time_ms(lambda case=case: bench.run_tq(case))}
            for label_c, cfg in configs.items():
                try:
                    times[label_c] = bench.time_ms(lambda cfg=cfg, case=case: bench.run_tq(case, config=cfg))
                except Exception as exc:  # recorded, not fatal
                    print(f"   {preset} {label_c}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            best = min(times, key=times.get)
            results.append(
                {
                    "shape": name,
                    "preset": preset,
                    "bf16_ms": bf16,
                    "bf16": label,
                    "ms": times,
                    "best": best,
                    "configs": {k: asdict(v) for k, v in configs.items()},
                    "table_config": asdict(table_config(case, preset)),
                }
            )
            cols = "  ".join(f"{k} {v * 1e3:7.1f} us ({bf16 / v:.2f}x)" for k, v in times.items())
            print(f"   {preset:20} {cols}  [{time.time() - t0:.0f} s]", flush=True)
            del case
            torch.cuda.empty_cache()
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
