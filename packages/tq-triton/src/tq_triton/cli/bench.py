"""tq bench: tq_triton.attention side by side with its peers on the present GPU.

Per case: tq_triton.attention; the two per-token baselines the turboquant-xpu project
used, built from our own q_len=1 path (one call per verify token; one batched call where
every verify token is its own request); bf16 attention on the same shape through torch
SDPA's fastest backend; and the store's throughput. Times are medians of many runs after
warm-up (device events); bandwidth is the compressed bytes one call must read over its time,
also as a share of the copy bandwidth measured in the same run. By default every named
shape and every format runs. The table ends with the gate line (every tq row at least
--gate times as fast as the fastest bf16 kernel of its shape) and the project's speed
targets, each met, missed or not run. With --json the rows measured so far are written
after every case ("complete": false in the file's meta until the run ends), so a run
stopped by a time limit keeps them. Needs a cuda or xpu GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from pathlib import Path

import torch

from tq_core import CALIBRATED_PRESETS, PRESETS, BackendUnavailableError, TQError, get_preset
from tq_core.cli import UsageError
from tq_core.cli.argtypes import choice_list, int_list, positive_float, positive_int
from tq_core.cli.options import (
    add_block_size_option,
    add_command,
    add_head_dim_option,
    add_json_option,
    add_presets_option,
)
from tq_core.cli.output import utc_timestamp, write_json

from .. import bench
from ..attention.plan import served_by
from ..device import device_key
from ..store import store
from . import gpu_device
from ._progress import progress

# every format: vLLM's four and tq's calibrated ones
EVERY_PRESET = (*PRESETS, *CALIBRATED_PRESETS)
# the gate line's default bar over the fastest bf16 kernel of each shape
GATE = 1.3
# the store rows: this many tokens of 8 kv heads at head_dim 128, in one call
STORE_TOKENS = 1 << 20
STORE_SHAPE = f"store-{STORE_TOKENS // 1024}k-tok"
# a vendor kernel earns its table entry where it is at least this many times as fast as the
# portable kernel with the same entry, in the same run (--kernel both)
VENDOR_BAR = 1.1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "bench", help="benchmark tq_triton against bf16 attention and baselines", doc=__doc__)
    p.add_argument(
        "--shapes",
        type=choice_list([*bench.SHAPES, "custom"], "shape"),
        default=",".join(bench.SHAPES),
        help=f"comma list of named shapes ({', '.join(bench.SHAPES)}) or 'custom', built from the options below "
        "(default: every named shape)",
    )
    add_presets_option(p, default=",".join(EVERY_PRESET))
    p.add_argument("--batch", type=positive_int, default=8, help="custom shape: requests (default 8)")
    p.add_argument("--q-heads", type=positive_int, default=32, help="custom shape: query heads (default 32)")
    p.add_argument(
        "--kv-heads", type=positive_int, default=8, help="custom shape: kv heads, dividing --q-heads (default 8)"
    )
    add_head_dim_option(p, help="custom shape: head dim (default 128)")
    p.add_argument("--seq-len", type=positive_int, default=8192, help="custom shape: tokens per request (default 8192)")
    p.add_argument("--q-len", type=positive_int, default=1, help="custom shape: query tokens per request (default 1)")
    p.add_argument(
        "--q-lens", type=int_list(1), help="custom shape: comma list of q_len per request (ragged; sets the batch size)"
    )
    add_block_size_option(p)
    p.add_argument(
        "--seq-lens", type=int_list(1), help="comma list: also run each shape at these sequence lengths (for --plot)"
    )
    p.add_argument(
        "--kernel",
        choices=(*bench.KERNELS, "both"),
        default="default",
        help="default: the kernel the launch plan picks for each row (vendor kernels where the device's table "
        "asks for them); portable: the portable Triton kernel alone, with its table entries (the table's "
        "portable section over its attention section); both: the default path, and the portable kernel too "
        "where a vendor kernel serves the row (its time as "
        f"portable_ms), with the vendor rows that are not {VENDOR_BAR:g}x as fast as it listed at the end. "
        "Each row records the kernel that served it",
    )
    p.add_argument("--no-baselines", action="store_true", help="skip the per-token baselines")
    p.add_argument("--no-store", action="store_true", help="skip the store throughput rows")
    p.add_argument(
        "--gate",
        type=positive_float,
        default=GATE,
        metavar="X",
        help=f"the gate line's bar: every tq row at least X times as fast as the fastest bf16 kernel (default {GATE})",
    )
    add_json_option(p, what="the rows")
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="PNG",
        help="also plot time and bandwidth use (over seq_len with --seq-lens) to PNG; needs matplotlib",
    )
    p.set_defaults(func=run)


def _shapes(args: argparse.Namespace) -> list[bench.Shape]:
    """The shapes to run; UsageError for a custom shape whose options do not fit together."""
    out = []
    for name in args.shapes:
        if name == "custom":
            qls = tuple(args.q_lens) if args.q_lens else None
            if args.q_heads % args.kv_heads:
                raise UsageError(f"--q-heads {args.q_heads} must be a multiple of --kv-heads {args.kv_heads}")
            if max(qls or (args.q_len,)) > args.seq_len:
                raise UsageError(f"query lengths must not exceed --seq-len {args.seq_len}")
            same = ("q_heads", "kv_heads", "head_dim", "seq_len", "q_len", "block_size")  # option = field
            batch = len(qls) if qls else args.batch
            out.append(bench.Shape("custom", batch=batch, q_lens=qls, **{k: getattr(args, k) for k in same}))
        else:
            out.append(dataclasses.replace(bench.SHAPES[name], block_size=args.block_size))
    if args.seq_lens:
        out = [bench.with_seq_len(s, L) if not s.seq_lens else s for s in out for L in args.seq_lens]
    return out


def _check_layouts(shapes: list[bench.Shape], presets: list[str]) -> None:
    """UsageError where a preset cannot lay out a shape's cache block (e.g. --block-size too small)."""
    for shape in shapes:
        for name in presets:
            try:
                get_preset(name).block_layout(shape.head_dim, shape.block_size, shape.kv_heads)
            except TQError as exc:
                raise UsageError(f"shape {shape.name}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    presets = args.presets
    shapes = _shapes(args)
    _check_layouts(shapes, presets)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise BackendUnavailableError("--plot needs matplotlib (pip install matplotlib)")
    dev = gpu_device()
    bw = bench.copy_bandwidth_gbs(dev)
    meta = {
        "device": device_key(dev),
        "copy_bandwidth_gbs": bw,
        "date": utc_timestamp(),
        "command": "tq " + " ".join(sys.argv[1:]),
        "kernel": args.kernel,
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "complete": False,
    }
    rows: list[dict] = []
    jobs = [(s, p) for s in shapes for p in presets]
    bf16_ms: dict[str, float] = {}
    for shape, preset in progress(jobs, len(jobs), "bench"):
        uniform = not shape.q_lens and not shape.seq_lens
        need_dense = shape.name not in bf16_ms
        case = bench.build_case(shape, preset, dev, seed=0, dense=need_dense)
        if need_dense:
            fn, backend = bench.sdpa_bf16(case)
            t = bench.time_ms(fn)
            bf16_ms[shape.name] = t
            rows.append(_row(shape, "bf16", backend, t, case.bf16_bytes_read, bw))
            case.dense_k = case.dense_v = None
        # planned once, as vLLM's plugin plans once per step
        plan = bench.case_plan(case, "default" if args.kernel == "both" else args.kernel)
        t = bench.time_ms(lambda case=case, plan=plan: bench.run_tq(case, plan=plan))
        row = _row(shape, preset, "tq_triton", t, case.cache_bytes_read, bw)
        row["kernel"] = served_by(plan)
        if args.kernel == "both":
            row["portable_ms"] = t
            if row["kernel"] != "portable":
                portable = bench.case_plan(case, "portable")
                row["portable_ms"] = bench.time_ms(lambda case=case, plan=portable: bench.run_tq(case, plan=plan))
            row["x_vs_portable"] = row["portable_ms"] / t
        rows.append(row)
        if not args.no_baselines and max(shape.request_q_lens()) > 1:
            if uniform:
                rows.append(
                    _row(
                        shape,
                        preset,
                        "looped-per-token",
                        bench.time_ms(bench.looped_per_token(case)),
                        case.cache_bytes_read,
                        bw,
                    )
                )
            rows.append(
                _row(
                    shape,
                    preset,
                    "batched-per-token",
                    bench.time_ms(bench.batched_per_token(case)),
                    case.cache_bytes_read,
                    bw,
                )
            )
        del case
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        if args.json:
            # the rows so far, rewritten after every case: a run stopped by a time limit keeps
            # what it measured ("complete": false)
            write_json(args.json, {"meta": meta, "rows": rows})
    _ratios(rows)
    if not args.no_store:
        rows += _store_rows(presets, dev, bw)
    _print(rows, bw, dev)
    gate = bf16_gate(rows, args.gate)
    print(gate_line(gate))
    vendor = vendor_rows(rows) if args.kernel == "both" else None
    if vendor is not None:
        print(vendor_line(vendor))
    goals = targets(rows)
    _print_targets(goals)
    meta["complete"] = True
    if args.json:
        extra = {} if vendor is None else {"vendor": vendor}
        write_json(args.json, {"meta": meta, "rows": rows, "gate": gate, "targets": goals, **extra})
    if args.plot:
        _plot(rows, bw, args.plot, args.gate)
    return 0


def _row(shape: bench.Shape, preset: str, impl: str, ms: float, nbytes: int, bw: float) -> dict:
    gbs = nbytes / (ms * 1e-3) / 1e9
    return {
        "shape": shape.name,
        "seq_len": shape.seq_len,
        "preset": preset,
        "impl": impl,
        "ms": ms,
        "gbs": gbs,
        "pct_copy_bw": 100 * gbs / bw,
    }


def _ratios(rows: list[dict]) -> None:
    """Speed-ups of tq_triton rows over every peer of the same shape (and preset)."""
    for r in rows:
        if r["impl"] != "tq_triton":
            continue
        for peer in rows:
            if peer["shape"] != r["shape"] or peer is r:
                continue
            if peer["impl"] == "tq_triton":
                continue
            if peer["preset"] not in ("bf16", r["preset"]):
                continue
            key = "x_vs_bf16" if peer["preset"] == "bf16" else f"x_vs_{peer['impl']}"
            r[key] = peer["ms"] / r["ms"]


def bf16_gate(rows: list[dict], factor: float = GATE) -> dict:
    """Whether every tq_triton row is at least ``factor`` times as fast as the fastest bf16
    kernel of its shape: ``{"held": bool, "factor": factor, "slower": [{"shape", "preset",
    "x_vs_bf16"}, ...], "rows": n}`` (rows without a bf16 peer are not counted)."""
    timed = [r for r in rows if r["impl"] == "tq_triton" and "x_vs_bf16" in r]
    slower = [
        {"shape": r["shape"], "preset": r["preset"], "x_vs_bf16": round(r["x_vs_bf16"], 3)}
        for r in timed
        if r["x_vs_bf16"] < factor
    ]
    return {"held": bool(timed) and not slower, "factor": factor, "slower": slower, "rows": len(timed)}


def gate_line(gate: dict) -> str:
    """One line for the end of the table: the gate's outcome, and the rows that miss it."""
    what = f"gate (tq at least {gate['factor']:g}x as fast as the fastest bf16 on every shape)"
    if not gate["rows"]:
        return f"{what}: no tq row has a bf16 peer"
    if gate["held"]:
        return f"{what}: held, {gate['rows']} of {gate['rows']} rows"
    misses = ", ".join(
        f"{m['shape']} {m['preset'].removeprefix('turboquant_')} {m['x_vs_bf16']:.2f}x" for m in gate["slower"]
    )
    return f"{what}: missed by {len(gate['slower'])} of {gate['rows']} rows: {misses}"


def vendor_rows(rows: list[dict], bar: float = VENDOR_BAR) -> dict:
    """The rows a vendor kernel served (``--kernel both``) against the portable kernel of the
    same run: ``{"bar": bar, "earned": [...], "below": [...]}``, each item ``{"shape",
    "preset", "kernel", "x_vs_portable"}``; ``below`` lists the rows where the vendor kernel is
    not ``bar`` times as fast, whose table entries should then leave it off."""
    out: dict = {"bar": bar, "earned": [], "below": []}
    for r in rows:
        if r["impl"] != "tq_triton" or r.get("kernel", "portable") == "portable" or "x_vs_portable" not in r:
            continue
        item = {k: r[k] for k in ("shape", "preset", "kernel")} | {"x_vs_portable": round(r["x_vs_portable"], 3)}
        out["earned" if r["x_vs_portable"] >= bar else "below"].append(item)
    return out


def vendor_line(vendor: dict) -> str:
    """One line for the end of the table: how many vendor-kernel rows beat the portable kernel
    by ``vendor["bar"]``, and the rows that do not."""
    n = len(vendor["earned"]) + len(vendor["below"])
    what = f"vendor kernels at least {vendor['bar']:g}x the portable kernel"
    if not n:
        return f"{what}: no row ran a vendor kernel"
    line = f"{what}: {len(vendor['earned'])} of {n} rows"
    if vendor["below"]:
        line += "; below: " + ", ".join(
            f"{m['shape']} {m['preset'].removeprefix('turboquant_')} {m['kernel']} {m['x_vs_portable']:.2f}x"
            for m in vendor["below"]
        )
    return line


# the project's speed targets: (shape, preset or "*" for every preset run, row field, goal,
# unit); a goal with unit "us" is a ceiling on the row's time, every other one a floor
TARGETS: tuple[tuple[str, str, str, float, str], ...] = (
    ("decode-32k", "turboquant_k3v4_nc", "x_vs_bf16", 3.0, "x bf16"),
    ("decode-32k", "turboquant_k3v4_nc", "pct_copy_bw", 70.0, "% copy bw"),
    ("decode-32k", "turboquant_k8v4", "x_vs_bf16", 2.4, "x bf16"),
    ("verify-32k", "turboquant_k3v4_nc", "x_vs_bf16", 3.0, "x bf16"),
    ("verify-32k", "turboquant_k8v4", "x_vs_bf16", 2.0, "x bf16"),
    ("poc", "turboquant_k3v4_nc", "us", 20.0, "us"),
    ("poc", "turboquant_k8v4", "us", 20.0, "us"),
    (STORE_SHAPE, "*", "pct_copy_bw", 50.0, "% copy bw"),
)


def targets(rows: list[dict]) -> list[dict]:
    """:data:`TARGETS` against the rows: one ``{"shape", "preset", "goal", "unit", "measured",
    "met"}`` per target and preset (``measured`` None and ``met`` None where the row was not run)."""
    out = []
    for shape, preset, field, goal, unit in TARGETS:
        impl = "tq_triton.store" if shape == STORE_SHAPE else "tq_triton"
        found = [r for r in rows if r["shape"] == shape and r["impl"] == impl and preset in ("*", r["preset"])]
        names = [r["preset"] for r in found] if preset == "*" else [preset]
        for name in names:
            row = next((r for r in found if r["preset"] == name), None)
            value = None
            if row is not None:
                value = row["ms"] * 1e3 if field == "us" else row.get(field)
            met = None if value is None else (value <= goal if field == "us" else value >= goal)
            out.append({"shape": shape, "preset": name, "goal": goal, "unit": unit, "measured": value, "met": met})
    return out


def _print_targets(goals: list[dict]) -> None:
    print("\ntargets")
    for g in goals:
        bound = "<=" if g["unit"] == "us" else ">="
        got = "not run" if g["measured"] is None else f"{g['measured']:.2f}"
        verdict = "" if g["met"] is None else ("met" if g["met"] else "missed")
        print(
            f"  {g['shape']:16} {g['preset'].removeprefix('turboquant_'):10} {bound} {g['goal']:g} {g['unit']:10}"
            f" {got:>8}  {verdict}"
        )


def _store_rows(presets: list[str], dev: torch.device, bw: float) -> list[dict]:
    n, h, d = STORE_TOKENS, 8, 128
    k, v, slots = bench.store_inputs(n, h, d, dev, seed=1)
    rows = []
    for preset in presets:
        cache = bench.store_cache(preset, n, h, d, dev)
        slot = cache.shape[-1]
        extra = bench.store_extra(preset, n, h, d, dev)
        t = bench.time_ms(
            lambda cache=cache, preset=preset, extra=extra: store(k, v, cache, slots, preset, **extra), warmup=5, rep=30
        )
        nbytes = n * h * (2 * d * 2 + slot)
        gbs = nbytes / (t * 1e-3) / 1e9
        rows.append(
            {
                "shape": STORE_SHAPE,
                "seq_len": n,
                "preset": preset,
                "impl": "tq_triton.store",
                "ms": t,
                "gbs": gbs,
                "pct_copy_bw": 100 * gbs / bw,
                "mtok_s": n / (t * 1e-3) / 1e6,
            }
        )
    return rows


def _fmt(r: dict, k: str) -> str:
    return f"{r[k]:.2f}" if k in r else "-"


def _print(rows: list[dict], bw: float, dev: torch.device) -> None:
    print(f"\ndevice: {device_key(dev)}   copy bandwidth (read+write): {bw:.0f} GB/s")
    cols = ("shape", "preset", "impl", "kernel", "ms", "GB/s", "%bw", "x bf16", "x looped", "x batched", "x port")
    head = "{:22} {:20} {:20} {:12} {:>9} {:>7} {:>6} {:>7} {:>8} {:>9} {:>6}".format(*cols)
    print(head)
    print("-" * len(head))
    for r in rows:
        extra = f" {r['mtok_s']:.0f} Mtok/s" if "mtok_s" in r else ""
        ratios = (
            _fmt(r, "x_vs_bf16"),
            _fmt(r, "x_vs_looped-per-token"),
            _fmt(r, "x_vs_batched-per-token"),
            _fmt(r, "x_vs_portable"),
        )
        print(
            f"{r['shape']:22} {r['preset']:20} {r['impl']:20} {r.get('kernel', '-'):12}"
            f" {r['ms']:9.4f} {r['gbs']:7.0f} {r['pct_copy_bw']:6.1f} "
            "{:>7} {:>8} {:>9} {:>6}".format(*ratios)
            + extra
        )


def _label(r: dict) -> str:
    return r["impl"] + ("" if r["preset"] == "bf16" else f" {r['preset'].removeprefix('turboquant_')}")


def _plot(rows: list[dict], bw: float, path: Path, gate: float | None = None) -> None:
    """Time and bandwidth use per implementation: lines over seq_len when several lengths
    were run (--seq-lens); otherwise grouped bars per shape of each format's speed-up over
    the fastest bf16 kernel (with the ``gate`` bar) and of bandwidth use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if not r["shape"].startswith("store")]
    bases = list(dict.fromkeys(r["shape"].split("@")[0] for r in rows))
    swept = any(len({r["seq_len"] for r in rows if r["shape"].split("@")[0] == b}) > 1 for b in bases)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    if swept:
        for base in bases:
            series: dict[str, list[tuple[int, float, float]]] = {}
            for r in rows:
                if r["shape"].split("@")[0] == base:
                    series.setdefault(f"{base} {_label(r)}", []).append((r["seq_len"], r["ms"], r["pct_copy_bw"]))
            for label, pts in series.items():
                pts.sort()
                ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
                ax2.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=label)
        ax1.set(xscale="log", yscale="log", xlabel="seq_len", ylabel="ms (median)", title="attention time")
        ax2.set(xscale="log", xlabel="seq_len", ylabel="% of copy bandwidth")
        ax1.legend(fontsize=6)
    else:
        # bf16 rows under one label (each shape's fastest kernel differs), tq rows per format
        def label(r: dict) -> str:
            return "fastest bf16" if r["preset"] == "bf16" else _label(r)

        impls = list(dict.fromkeys(label(r) for r in rows))
        width = 0.8 / max(1, len(impls))
        for i, impl in enumerate(impls):
            xs, speedup, pct = [], [], []
            for j, base in enumerate(bases):
                for r in rows:
                    if r["shape"] == base and label(r) == impl:
                        xs.append(j + i * width)
                        speedup.append(r.get("x_vs_bf16", 1.0))
                        pct.append(r["pct_copy_bw"])
            if impl != "fastest bf16":
                ax1.bar(xs, speedup, width, label=impl, color=f"C{i}")
            ax2.bar(xs, pct, width, label=impl, color=f"C{i}")
        for ax in (ax1, ax2):
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(bases))], bases, rotation=30, ha="right")
        ax1.axhline(1.0, color="black", linewidth=0.8)
        if gate:
            ax1.axhline(gate, color="grey", linestyle="--", linewidth=0.8, label=f"gate {gate:g}x")
        ax1.set(ylabel="x the fastest bf16 kernel (higher is better)", title="speed-up over bf16 attention per call")
        ax1.legend(fontsize=7)
        ax2.legend(fontsize=7)
    ax2.set(title=f"compressed bytes read / time, % of copy bandwidth ({bw:.0f} GB/s)")
    ax2.axhline(70, color="grey", linestyle="--", linewidth=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
