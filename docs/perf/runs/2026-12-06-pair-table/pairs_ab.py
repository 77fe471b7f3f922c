"""Times the portable kernel (run with TQ_GLUON=0) of the tree on PYTHONPATH, reading 3- and 4-bit
codebooks as that tree plans (``table``) or gathered one code at a time (``gather``:
``plan.table_keys`` / ``plan.table_values`` patched to False), at bench shapes. One JSON row per
(shape, format) on stdout; ``--bf16`` adds the fastest bf16 kernel; ``--prewarm N`` only
compiles, in N worker processes, into Triton's disk cache. ``pairs_run.sh`` is the call."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time

import torch

from tq_triton import bench
from tq_triton.attention import plan as P

PLANNED = (P.table_keys, P.table_values)


def set_variant(v: str) -> None:
    if v == "gather":
        P.table_keys = P.table_values = lambda preset: False
    else:
        P.table_keys, P.table_values = PLANNED


def digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.contiguous().view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tree", required=True, help="a label for the rows")
    ap.add_argument("--out", required=True, help="JSON file of all rows")
    ap.add_argument("--variants", default="table,gather")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--prewarm", type=int, default=0)
    ap.add_argument("--worker", default="", help="internal: I/N, the prewarm worker's share")
    ap.add_argument("--presets", default="turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc,tq_k4v3,tq_k4v4")
    ap.add_argument("--shapes", default="decode-32k,verify-32k-q4,verify-32k-q16,decode-d64,decode-d256,poc")
    a = ap.parse_args()
    cases = [(s, p) for s in a.shapes.split(",") for p in a.presets.split(",")]
    variants = a.variants.split(",")
    dev = torch.device("cuda")

    if a.prewarm:
        t0 = time.time()
        argv = [sys.executable, __file__, "--tree", a.tree, "--out", "/dev/null", "--variants", a.variants]
        argv += ["--presets", a.presets, "--shapes", a.shapes]
        procs = [subprocess.Popen([*argv, "--worker", f"{i}/{a.prewarm}"]) for i in range(a.prewarm)]
        rc = [p.wait() for p in procs]
        print(f"prewarm {a.tree}: rc {rc} in {time.time() - t0:.0f} s", flush=True)
        return
    share = tuple(map(int, a.worker.split("/"))) if a.worker else None

    rows = []
    for k, (s, p) in enumerate(cases):
        if share and k % share[1] != share[0]:
            continue
        case = bench.build_case(bench.SHAPES[s], p, dev, dense=a.bf16 and not share)
        row = {"tree": a.tree, "shape": s, "preset": p}
        for v in variants:
            set_variant(v)
            plan = bench.case_plan(case, "portable")
            out = bench.run_tq(case, plan=plan)
            torch.cuda.synchronize()
            if share:
                continue
            row[f"{v}_digest"] = digest(out)
            row[f"{v}_ms"] = [bench.time_ms(lambda case=case, plan=plan: bench.run_tq(case, plan=plan))]
        if not share:
            # the second timing of each variant in the reverse order, so that a drift shows
            for v in reversed(variants):
                set_variant(v)
                plan = bench.case_plan(case, "portable")
                row[f"{v}_ms"].append(bench.time_ms(lambda case=case, plan=plan: bench.run_tq(case, plan=plan)))
        if a.bf16 and not share:
            best = None
            for label, fn, _ in bench.bf16_candidates(case):
                try:
                    t = bench.time_ms(fn)
                except Exception:  # a backend that refuses the shape
                    continue
                if best is None or t < best[1]:
                    best = (label, t)
            row["bf16"] = best
        set_variant("table")
        if not share:
            print(json.dumps(row), flush=True)
            rows.append(row)
        del case
        torch.cuda.empty_cache()
    if not share:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
