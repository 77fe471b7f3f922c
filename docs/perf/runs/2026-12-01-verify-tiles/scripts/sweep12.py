# ruff: noqa: B023, SIM115
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""Verify-bucket grid on verify-32k and poc, both presets; phase 'compile' (a worker slice) or 'time'."""

import itertools
import json
import os
import sys
import time

import torch

from tq_triton import bench
from tq_triton.tuning import AttentionConfig

PRESETS = ["turboquant_k3v4_nc", "turboquant_k8v4"]
SHAPES = ["verify-32k", "poc"]


def grid():
    out = []
    for w, bkv, (sp, wv), va, vw in itertools.product(
        [1, 2, 4], [16, 32, 64], [(32, 64), (0, 16), (0, 64)], [0, 1], [0, 1]
    ):
        out.append(
            AttentionConfig(
                block_kv=bkv,
                num_warps=w,
                prefetch=1,
                num_stages=1,
                kv_splits=sp,
                waves=wv,
                value_acc=va,
                value_words=vw,
            )
        )
    return out


def jobs():
    return [(s, p, c) for s in SHAPES for p in PRESETS for c in grid()]


def main():
    phase = sys.argv[1]
    dev = torch.device("cuda")
    js = jobs()
    if phase == "compile":
        k, n = int(sys.argv[2]), int(sys.argv[3])
        js = js[k::n]
    cases = {}
    res = []
    t0 = time.time()
    for s, p, c in js:
        if (s, p) not in cases:
            cases.clear()
            torch.cuda.empty_cache()
            cases[(s, p)] = bench.build_case(bench.SHAPES[s], p, dev, seed=0)
        case = cases[(s, p)]
        try:
            if phase == "compile":
                bench.run_tq(case, config=c)
                torch.cuda.synchronize()
                continue
            t = bench.time_ms(lambda: bench.run_tq(case, config=c), warmup=10, rep=40)
            res.append(
                {
                    "shape": s,
                    "preset": p,
                    "w": c.num_warps,
                    "bkv": c.block_kv,
                    "sp": c.kv_splits,
                    "wv": c.waves,
                    "va": c.value_acc,
                    "vw": c.value_words,
                    "ms": t,
                }
            )
        except Exception as e:
            if phase == "time":
                res.append(
                    {
                        "shape": s,
                        "preset": p,
                        "w": c.num_warps,
                        "bkv": c.block_kv,
                        "sp": c.kv_splits,
                        "wv": c.waves,
                        "va": c.value_acc,
                        "vw": c.value_words,
                        "err": str(e)[:120],
                    }
                )
    if phase == "time":
        json.dump(res, open(os.environ["OUT"] + "/sweep12.json", "w"), indent=0)
        for s in SHAPES:
            for p in PRESETS:
                rows = sorted(
                    [r for r in res if r["shape"] == s and r["preset"] == p and "ms" in r], key=lambda r: r["ms"]
                )
                cur = [r for r in rows if r["w"] == 4 and r["bkv"] == 64 and r["sp"] == 32 and r["vw"] == 0]
                print(f"== {s} {p}: table-like {[round(r['ms'], 4) for r in cur]}")
                for r in rows[:8]:
                    print("  ", {k: v for k, v in r.items() if k not in ("shape", "preset")})
        errs = [r for r in res if "err" in r]
        print("errors:", len(errs), errs[:3])
    print(f"{phase} done {time.time() - t0:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
