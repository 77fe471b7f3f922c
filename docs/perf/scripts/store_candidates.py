"""Candidate store configurations timed against the current one, in one process on one GPU.

For every preset (vLLM's four and tq's calibrated formats) at tq bench's store shape
(``tq_triton.cli.bench.STORE_TOKENS`` tokens of 8 kv heads at head_dim 128, bfloat16 inputs
from ``bench.store_inputs``, a shuffled slot per token), the store is timed with the
device's current configuration (``tuning.store_config``: the shipped table's entry,
"current") and with each candidate of :data:`CANDIDATES` applied over it: the median of
CUDA-graph replays after warm-up (``bench.time_ms``, as tq bench times its store rows),
and the share of the copy bandwidth measured in the same process, computed as tq bench
computes it (bytes read and written: ``tokens * heads * (2 * head_dim * 2 + slot bytes)``).

Each candidate's cache is compared with the current configuration's, written from the
same inputs: the share of code fields' codes that differ (keys and values, unpacked only in
the slots whose bytes differ), the largest code difference (one level at most on a rounding
boundary), and the fp16 fields (norms, scales, zero points) that differ and by how many
fp16 steps. A candidate is ``ok`` when no code moves by more than one level, no fp16 field
by more than one step, and at most ``--max-code-diff`` of the codes differ. The candidates
change only tiles, warps, registers and the code search, not the arithmetic, so their
caches should equal the current one's byte for byte.

    python docs/perf/scripts/store_candidates.py [--presets P,...] [--configs NAME,...] [--json OUT]
    TRITON_INTERPRET=1 python docs/perf/scripts/store_candidates.py --small   # the CPU, tiny shapes

Prints one table row per preset and configuration, then one line of JSON with every
result (also written to ``--json``). ``--small`` runs 32 tokens of one kv head on whatever
device there is (the CPU under Triton's interpreter), timing a single call: it checks the
script and the configurations, not their speed.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace

import torch

import tq_core
from tq_core import get_preset, unpack_codes
from tq_triton import bench
from tq_triton.cli.bench import STORE_SHAPE, STORE_TOKENS
from tq_triton.store import store
from tq_triton.tuning import StoreConfig, store_config

EVERY_PRESET = (*tq_core.PRESETS, *tq_core.CALIBRATED_PRESETS)
# name -> fields set over the current configuration: programs of 16-128 tokens over 1 to 8
# warps (``tBwW``; those of one or two warps uncapped, ``max_registers`` 0: fewer warps keep
# the rotation's butterflies and the row sums inside a warp, for more registers per thread),
# a cap of 128 registers (``r128``, cuda only) so that more 64-token programs fit on a
# multiprocessor, and codebook codes by binary search (``search``), by counting the
# boundaries (``count``) or from uniform bins (``bins``, alone and with other tiles)
CANDIDATES: dict[str, dict[str, int]] = {
    "t16w1": {"block_t": 16, "num_warps": 1, "max_registers": 0},
    "t16w2": {"block_t": 16, "num_warps": 2, "max_registers": 0},
    "t32w2": {"block_t": 32, "num_warps": 2, "max_registers": 0},
    "t32w4": {"block_t": 32, "num_warps": 4},
    "t64w4": {"block_t": 64, "num_warps": 4},
    "t64w8": {"block_t": 64, "num_warps": 8},
    "t128w8": {"block_t": 128, "num_warps": 8},
    "t64w4-r128": {"block_t": 64, "num_warps": 4, "max_registers": 128},
    "search": {"code_search": 1},
    "count": {"code_search": 0},
    "bins": {"code_search": 2},
    "t16w2-bins": {"block_t": 16, "num_warps": 2, "max_registers": 0, "code_search": 2},
    "t32w4-bins": {"block_t": 32, "num_warps": 4, "code_search": 2},
    "t32w4-nocap-bins": {"block_t": 32, "num_warps": 4, "max_registers": 0, "code_search": 2},
    "nocap-bins": {"max_registers": 0, "code_search": 2},
}
SMALL_TOKENS, SMALL_HEADS = 32, 1


def applies(preset: str, fields: dict[str, int]) -> bool:
    """``code_search`` only changes formats with Lloyd-Max rows (all but k8v4)."""
    p = get_preset(preset)
    return not ("code_search" in fields and p.key_is_fp8 and not p.calibrated)


def wall_ms(fn, device: torch.device) -> float:
    """One call's wall time, for ``--small`` (no CUDA events on the CPU)."""
    t = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def compare(preset: str, head_dim: int, a: torch.Tensor, b: torch.Tensor, num_kv_heads: int) -> dict:
    """How cache ``b`` differs from ``a`` (both ``[blocks, 16, heads, slot]``)."""
    p = get_preset(preset)
    lay = p.block_layout(head_dim, a.shape[1], num_kv_heads)
    fa, fb = tq_core.block_fields(a, lay), tq_core.block_fields(b, lay)
    out = {"bytes_differ": int((a != b).sum())}
    codes = changed = 0
    worst = 0
    fields = [("value", p.value_bits)] if p.key_is_fp8 else [("key", p.key_bits), ("value", p.value_bits)]
    for name, bits in fields:
        x, y = getattr(fa, name), getattr(fb, name)
        codes += x.numel() * 8 // bits
        rows = (x != y).any(-1)
        if rows.any():
            ca = unpack_codes(x[rows], bits, head_dim).int()
            cb = unpack_codes(y[rows], bits, head_dim).int()
            changed += int((ca != cb).sum())
            worst = max(worst, int((ca - cb).abs().max()))
    if p.key_is_fp8:
        out["fp8_keys_differ"] = int((fa.key != fb.key).sum())
    fp16_steps = 0
    fp16_differ = 0
    for name in ("norm", "scale", "zero"):
        x, y = getattr(fa, name), getattr(fb, name)
        if x is None:
            continue
        ix = x.contiguous().view(torch.int16).int()
        iy = y.contiguous().view(torch.int16).int()
        fp16_differ += int((ix != iy).sum())
        fp16_steps = max(fp16_steps, int((ix - iy).abs().max()))
    out |= {
        "codes": codes,
        "codes_differ": changed,
        "code_diff_fraction": changed / codes,
        "max_code_step": worst,
        "fp16_differ": fp16_differ,
        "max_fp16_step": fp16_steps,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(EVERY_PRESET))
    ap.add_argument("--configs", default=",".join(CANDIDATES), help=f"candidates ({', '.join(CANDIDATES)})")
    ap.add_argument("--small", action="store_true", help="tiny shapes, one call each (TRITON_INTERPRET=1 on the CPU)")
    ap.add_argument("--max-code-diff", type=float, default=5e-5, help="share of codes a candidate may change")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    presets = args.presets.split(",")
    names = args.configs.split(",")
    for n in names:
        if n not in CANDIDATES:
            ap.error(f"unknown configuration {n!r}: {', '.join(CANDIDATES)}")
    start = time.perf_counter()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    n, h, d = (SMALL_TOKENS, SMALL_HEADS, 128) if args.small else (STORE_TOKENS, 8, 128)
    if args.small:
        bw = 0.0
    else:
        torch.cuda.init()
        bw = bench.copy_bandwidth_gbs(dev)
    k, v, slots = bench.store_inputs(n, h, d, dev, seed=1)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    small = f" (--small: {n} tokens x {h} kv heads)" if args.small else ""
    print(f"device {gpu}; shape {STORE_SHAPE}{small}; copy bandwidth {bw:.0f} GB/s")
    cols = ("preset", "config", "ms", "%copy", "vs cur", "codes differ", "max", "fp16")
    head = "{:20} {:12} {:>8} {:>6} {:>7} {:>13} {:>4} {:>5}  ok".format(*cols)
    print(head)
    print("-" * len(head))
    results = []
    for preset in presets:
        slot = get_preset(preset).layout(d).slot_size_aligned
        extra = bench.store_extra(preset, n, h, d, dev)
        current = store_config(dev, preset)
        nbytes = n * h * (2 * d * 2 + slot)
        ref = None
        base_ms = None
        for name in ["current", *names]:
            fields = {} if name == "current" else CANDIDATES[name]
            if not applies(preset, fields):
                continue
            cfg: StoreConfig = replace(current, **fields)
            cache = bench.store_cache(preset, n, h, d, dev)

            def run(cache=cache, cfg=cfg, preset=preset, extra=extra) -> None:
                store(k, v, cache, slots, preset, config=cfg, **extra)

            if args.small:
                ms = wall_ms(run, dev)  # one call: it also writes the cache the comparison reads
            else:
                run()  # compiles, and writes the cache the comparison reads
                torch.cuda.synchronize()
                ms = bench.time_ms(run, warmup=5, rep=30)
            pct = 100 * nbytes / (ms * 1e-3) / 1e9 / bw if bw else 0.0
            row = {"preset": preset, "config": name, **asdict(cfg), "ms": ms, "pct_copy_bw": pct}
            if ref is None:
                ref, base_ms = cache, ms
                row["ok"] = True
            else:
                row |= compare(preset, d, ref, cache, h)
                row["ok"] = (
                    row["max_code_step"] <= 1
                    and row["max_fp16_step"] <= 1
                    and row.get("fp8_keys_differ", 0) == 0
                    and row["code_diff_fraction"] <= args.max_code_diff
                )
                del cache
            row["speedup"] = base_ms / ms
            results.append(row)
            diff = f"{row['code_diff_fraction']:13.2e}" if "code_diff_fraction" in row else f"{'-':>13}"
            step = f"{row['max_code_step']:4d}" if "max_code_step" in row else f"{'-':>4}"
            f16 = f"{row['fp16_differ']:5d}" if "fp16_differ" in row else f"{'-':>5}"
            print(
                f"{preset:20} {name:12} {ms:8.4f} {pct:6.1f} {row['speedup']:6.2f}x {diff} {step} {f16}  "
                f"{'ok' if row['ok'] else 'DIFFERS'}",
                flush=True,
            )
        del ref
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    summary = {
        "shape": STORE_SHAPE,
        "tokens": n,
        "kv_heads": h,
        "head_dim": d,
        "small": args.small,
        "device": gpu,
        "copy_gbs": bw,
        "seconds": round(time.perf_counter() - start, 1),
        "all_ok": all(r["ok"] for r in results),
        "results": results,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
