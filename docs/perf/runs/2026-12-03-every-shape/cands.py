"""Candidate table entries for the buckets no sweep has tuned, timed on the H200 in one
process: for each bucket (its sweep shape, ``tq_triton.cli.sweep.bucket_shape``), format and
candidate ``AttentionConfig``, the median of CUDA-graph replays (``bench.time_ms``), beside
the shipped table's choice ("table") and the fastest bf16 kernel of the shape.

    python3 cands.py BUCKET[,BUCKET...] OUT.json [FORMAT,...]

(only the formats named, where given; at q2 and q4 by default only the formats without a
Gluon entry from a sweep.)
Results are appended to OUT.json after every format, so a run stopped at its time limit
keeps what it measured.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, replace

import torch

from tq_triton import bench
from tq_triton.cli.sweep import bucket_shape
from tq_triton.tuning import AttentionConfig

ALL = (
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "tq_k4v3",
    "tq_k4v4",
    "tq_k6v5",
)


def gluon_formats() -> tuple[str, ...]:
    """The formats whose keys and values the installed Gluon kernel decodes (``plan.gluon_refusal``)."""
    from tq_core import get_preset
    from tq_triton.attention import plan

    return tuple(
        p
        for p in ALL
        if not get_preset(p).calibrated and plan.gluon_keys(get_preset(p)) and plan.gluon_values(get_preset(p))
    )


GLUON = gluon_formats()

P = AttentionConfig(num_stages=1, prefetch=1)


def candidates(bucket: str, preset: str) -> dict[str, AttentionConfig]:
    """Label -> config; the Gluon kernel's candidates only for the formats it decodes."""
    if bucket == "q16":  # 64-row tiles
        c = {
            "p64w4s16": replace(P, block_kv=64, num_warps=4, kv_splits=16),
            "p64w4s32": replace(P, block_kv=64, num_warps=4, kv_splits=32),
            "p64w8s16": replace(P, block_kv=64, num_warps=8, kv_splits=16),
            "p32w4s16": replace(P, block_kv=32, num_warps=4, kv_splits=16),
            "p64w4b4": replace(P, block_kv=64, num_warps=4, kv_splits=16, split_budget=4),
        }
        if preset in GLUON:
            g = replace(P, block_kv=64, num_warps=4, kv_splits=16, gluon=1)
            c |= {
                "g64mma": g,
                "g64mma-b4": replace(g, split_budget=4),
                "g64wgmma": replace(g, wgmma=1),
                "g64wgmma-b4": replace(g, wgmma=1, split_budget=4),
                "g64wgmma-s32": replace(g, wgmma=1, kv_splits=32),
            }
        return c
    if bucket in ("q2", "q4"):  # 16-row tiles
        c = {
            "p32w2s16": replace(P, block_kv=32, num_warps=2, kv_splits=16),
            "p64w2s16": replace(P, block_kv=64, num_warps=2, kv_splits=16),
            "p32w2s32": replace(P, block_kv=32, num_warps=2, kv_splits=32),
            "p32w1s16": replace(P, block_kv=32, num_warps=1, kv_splits=16),
            "p64w4s32": replace(P, block_kv=64, num_warps=4, kv_splits=32),
            "p32w2b4": replace(P, block_kv=32, num_warps=2, kv_splits=16, split_budget=4),
        }
        if preset in GLUON:
            g = replace(P, block_kv=32, num_warps=2, kv_splits=16, gluon=1)
            c |= {"g32s16": g, "g32s32": replace(g, kv_splits=32), "g64s16": replace(g, block_kv=64)}
        return c
    if bucket == "q8":  # verify-32k: 32-row tiles
        c = {"p64w4s32": replace(P, block_kv=64, num_warps=4, kv_splits=32)}
        if preset in GLUON:
            g = replace(P, block_kv=64, num_warps=4, kv_splits=16, gluon=1)
            c |= {
                "g64s16": g,
                "g64s16b4": replace(g, split_budget=4),
                "g64s16b4se": replace(g, split_budget=4, skip_empty=1),
                "g32s16": replace(g, block_kv=32),
            }
        return c
    if bucket == "q8:m64":  # poc: 64-row tiles
        c = {"p64w4s32": replace(P, block_kv=64, num_warps=4, kv_splits=32)}
        if preset in GLUON:
            g = replace(P, block_kv=64, num_warps=4, kv_splits=16, gluon=1, min_rows=64)
            c |= {"g64wgmma": replace(g, wgmma=1), "g64mma": g, "g64wgmma-s32": replace(g, wgmma=1, kv_splits=32)}
        return c
    if bucket == "q1":  # decode-32k
        d = replace(P, block_kv=32, num_warps=1, kv_splits=0, waves=64)
        c = {"w1b32v64": d}
        if preset in GLUON:
            c |= {"g-w1b32v64": replace(d, gluon=1), "g-w1b32v32": replace(d, gluon=1, waves=32)}
        return c
    if bucket == "q1:d64":
        d = replace(P, block_kv=32, num_warps=1, kv_splits=0, waves=64)
        c = {
            "w1b32v64": d,
            "w1b32v64r168": replace(d, max_registers=168),
            "w1b64v64": replace(d, block_kv=64),
            "w1b32v32": replace(d, waves=32),
            "w2b64v32": replace(d, block_kv=64, num_warps=2, waves=32),
            "w1b32v64pipe3": replace(d, prefetch=0, num_stages=3),
        }
        if preset in GLUON:
            c["g-w1b32v64"] = replace(d, gluon=1)
        return c
    raise SystemExit(f"unknown bucket {bucket}")


def gluon_only(configs: dict[str, AttentionConfig]) -> dict[str, AttentionConfig]:
    """The Gluon candidates alone (``GLUON_ONLY=1``: where the table's portable entry was chosen
    from this script's portable candidates already)."""
    return {k: v for k, v in configs.items() if v.gluon}


def main() -> None:
    buckets, out_path = sys.argv[1].split(","), sys.argv[2]
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    dev = torch.device("cuda")
    results: list[dict] = []
    for bucket in buckets:
        shape = bucket_shape(bucket)
        # the q2 and q4 entries of the Gluon kernel's formats come from a sweep: only the others
        presets = [p for p in ALL if p not in GLUON] if bucket in ("q2", "q4") else list(ALL)
        if only:
            presets = [p for p in ALL if p in only]
        dense = bench.build_case(shape, ALL[0], dev, seed=0, dense=True)
        fn, label = bench.sdpa_bf16(dense)
        bf16 = bench.time_ms(fn)
        del dense
        torch.cuda.empty_cache()
        print(f"== {bucket} on {shape.name}: bf16 {label} {bf16 * 1e3:.1f} us", flush=True)
        for preset in presets:
            t0 = time.time()
            case = bench.build_case(shape, preset, dev, seed=0)
            row = {"bucket": bucket, "shape": shape.name, "preset": preset, "bf16_ms": bf16, "bf16": label}
            times: dict[str, float] = {"table": bench.time_ms(lambda case=case: bench.run_tq(case))}
            configs = candidates(bucket, preset)
            if os.environ.get("GLUON_ONLY") == "1" and bucket != "q4":
                configs = gluon_only(configs)
            for name, cfg in configs.items():
                try:
                    times[name] = bench.time_ms(lambda cfg=cfg, case=case: bench.run_tq(case, config=cfg))
                except Exception as exc:  # a candidate that does not compile is recorded
                    print(f"   {preset} {name}: {type(exc).__name__}: {str(exc)[:120]}")
            best = min(times, key=times.get)
            row |= {"ms": times, "best": best, "configs": {k: asdict(v) for k, v in configs.items()}}
            results.append(row)
            print(
                f"   {preset:20} table {times['table'] * 1e3:8.1f} us ({bf16 / times['table']:.2f}x bf16)  "
                f"best {best:14} {times[best] * 1e3:8.1f} us ({bf16 / times[best]:.2f}x bf16, "
                f"{times['table'] / times[best]:.2f}x table)  [{time.time() - t0:.0f} s]",
                flush=True,
            )
            del case
            torch.cuda.empty_cache()
            with open(out_path, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
