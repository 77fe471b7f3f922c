"""tq sweep: measure launch parameters on the present GPU and write a tuning table.

For each preset and query bucket it times tq_triton.attention on a representative
shape over a grid of tile sizes, warps, pipelining modes and split counts, and the store
over tile sizes, warps and codebook searches (binary search, uniform bins); the fastest entries go
into a JSON table that the launchers read from $TQ_TUNING_DIR (default ~/.cache/tq/tuning)
before the shipped ones. While it runs, what it has measured is written after every preset
and bucket to <table>.partial (marked "complete": false), which no launcher reads: a sweep
stopped part way keeps its measurements and leaves the table it would replace as it was.
Needs a cuda or xpu GPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import itertools
import multiprocessing
import re
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from tq_core import get_preset
from tq_core.cli import UsageError
from tq_core.cli.argtypes import choice_list, int_list, positive_int
from tq_core.cli.options import add_command, add_head_dim_option, add_presets_option
from tq_core.cli.output import utc_timestamp, write_json

from .. import bench, tuning
from ..device import device_key
from ..store import store
from ..tuning import AttentionConfig, StoreConfig
from . import gpu_device
from ._progress import progress

# bucket -> the named shape (bench.SHAPES) its entry is measured on, at the longest q_len the
# bucket serves: the verification buckets on verify-32k's batch (4 q heads per kv head:
# 32-row tiles at q_len 8), poc (8 per kv head) with 64-row tiles; their best tiles can
# differ, so poc's entry is keyed by its rows ("q8:m64", read after "q8": see tuning); decode
# at head_dim 64 on decode-d64, keyed by its head_dim ("q1:d64", read after "q1")
BUCKET_SHAPES = {
    "q1": "decode-32k",
    "q2": "verify-32k-q2",
    "q4": "verify-32k-q4",
    "q8": "verify-32k",
    "q16": "verify-32k-q16",
    "q8:m64": "poc",
    "q1:d64": "decode-d64",
}

MODES = {"prefetch": 1, "pipeline": 0}

# the AttentionConfig fields swept as plain value lists: (flag, field, allowed values or None
# for any integer >= 0, what the value means; tuning.AttentionConfig documents each)
KNOB_OPTIONS = (
    ("--min-rows", "min_rows", (16, 32, 64, 128), "the fewest query rows per tile (more query tokens per program)"),
    (
        "--gluon",
        "gluon",
        (0, 1, 2),
        "2: the token-rows kernel where it applies, else as 1; 1: the explicit-layout kernel where it applies, "
        "else the portable kernel; 0: the portable kernel",
    ),
    ("--wgmma", "wgmma", (0, 1), "with --gluon 1 or 2: Hopper's warpgroup products for 64-row tiles on sm_90"),
    ("--split-budget", "split_budget", None, "N > 0: kv splits sized from the batch's lengths for N programs per SM"),
    ("--skip-empty", "skip_empty", (0, 1), "1: a kv split with no position for its rows writes only -inf"),
)
KNOBS = tuple(field for _, field, _, _ in KNOB_OPTIONS)


def modes_list(text: str) -> list[tuple[int, int]]:
    """'prefetch:1,pipeline:3' -> [(prefetch, stages), ...] = [(1, 1), (0, 3)]."""
    out = []
    for item in text.split(","):
        kind, _, stages = item.strip().partition(":")
        if kind not in MODES or not (stages or "1").isdigit() or int(stages or 1) < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected prefetch:STAGES or pipeline:STAGES with STAGES a positive integer"
            )
        out.append((MODES[kind], int(stages or 1)))
    return out


def bucket_shape(bucket: str) -> bench.Shape:
    """The shape ``bucket`` (a key of :data:`BUCKET_SHAPES`) is swept on ("q4": verify-32k-q4)."""
    return bench.SHAPES[BUCKET_SHAPES[bucket]]


def swept_case(bucket: str, seq_len: int | None = None, head_dim: int | None = None) -> tuple[str, bench.Shape]:
    """(table key, shape) for sweeping ``bucket``, with the shape's sequence length and head
    dim overridden where given. A head dim keys the entry by it ("q1" at 256: "q1:d256", which
    tuning reads after "q1"); a bucket already keyed ("q8:m64", "q1:d64") takes none."""
    shape = bucket_shape(bucket)
    if seq_len:
        shape = bench.with_seq_len(shape, seq_len)
    if head_dim is None:
        return bucket, shape
    if ":" in bucket:
        raise UsageError(f"--head-dim applies to the buckets without a key suffix, not {bucket!r}")
    return f"{bucket}:d{head_dim}", replace(shape, name=f"{shape.name}-d{head_dim}", head_dim=head_dim)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "sweep", help="tune tq_triton's launch parameters on this GPU", doc=__doc__)
    add_presets_option(p)
    p.add_argument(
        "--buckets",
        type=choice_list(BUCKET_SHAPES, "bucket"),
        default="q1,q8,q8:m64",
        help="comma list of query buckets to sweep: "
        + ", ".join(f"{b} (on {s} at q_len {bucket_shape(b).q_len})" for b, s in BUCKET_SHAPES.items())
        + " (default q1,q8,q8:m64)",
    )
    # the swept launch parameters: flag, parser, default, what the values are
    lists = (
        ("--block-kv", int_list(1), "32,64,128", "key/value tile sizes"),
        ("--warps", int_list(1), "1,2,4", "warps per program"),
        ("--modes", modes_list, "prefetch:1,pipeline:3", "prefetch:STAGES or pipeline:STAGES"),
        ("--splits", int_list(0), "0,16,32", "split counts; 0 = from the grid size (--waves programs per SM)"),
        ("--max-registers", int_list(0), "0", "register caps per thread to try (cuda maxnreg); 0 = compiler's choice"),
        (
            "--waves",
            int_list(1),
            "4,16,64",
            "programs per multiprocessor to aim for where splits is 0 (one-warp programs want many)",
        ),
    )
    for flag, parse, default, what in lists:
        p.add_argument(flag, type=parse, default=default, help=f"comma list of {what} (default {default})")
    for flag, field, choices, what in KNOB_OPTIONS:
        p.add_argument(
            flag,
            type=int_list(0, choices=choices),
            default=str(getattr(AttentionConfig, field)),
            help=f"comma list of {field} values: {what} (default {getattr(AttentionConfig, field)})",
        )
    p.add_argument(
        "--seq-len", type=positive_int, default=None, help="override the shapes' sequence length (default 32768)"
    )
    add_head_dim_option(
        p,
        default=None,
        help="override the shapes' head dim; the entries are then keyed by it (q1 -> q1:d256), "
        "for buckets without a key suffix",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="PATH",
        help="table path (default: $TQ_TUNING_DIR/<device>.json, $TQ_TUNING_DIR defaulting to ~/.cache/tq/tuning)",
    )
    p.add_argument("--no-store", action="store_true", help="skip the store sweep")
    p.add_argument(
        "--compile-jobs",
        type=positive_int,
        default=1,
        metavar="N",
        help="worker processes that compile the grid's kernels (attention, and the store's unless "
        "--no-store) before the timed pass, which then finds them in Triton's disk cache; each worker "
        "holds its own GPU context and one swept batch (default 1: each kernel compiles when it is "
        "first timed)",
    )
    p.set_defaults(func=run)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def attention_grid(
    block_kv: list[int],
    warps: list[int],
    modes: list[tuple[int, int]],
    splits: list[int],
    max_registers: list[int],
    waves: list[int],
    **knobs: list[int] | None,
) -> list[AttentionConfig]:
    """Every combination to time; `modes` are (prefetch, stages). Waves only vary where the
    split count is chosen from the grid (splits 0); fixed split counts are timed once.
    `knobs`: lists of values for the fields of :data:`KNOBS`; a field left out or None keeps
    AttentionConfig's default."""
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise TypeError(f"attention_grid: unknown knobs {sorted(unknown)}")
    values = [knobs.get(k) or [getattr(AttentionConfig, k)] for k in KNOBS]
    return [
        AttentionConfig(
            block_kv=bkv,
            num_warps=w,
            prefetch=pf,
            num_stages=st,
            kv_splits=sp,
            waves=wv,
            max_registers=reg,
            **dict(zip(KNOBS, combo, strict=True)),
        )
        for bkv, w, (pf, st), sp, reg in itertools.product(block_kv, warps, modes, splits, max_registers)
        for wv in (waves if sp == 0 else [AttentionConfig.waves])
        for combo in itertools.product(*values)
    ]


def table_entry(cfg: AttentionConfig, ms: float) -> dict[str, int | float]:
    """The table entry for a measured configuration (`waves` only where it chose the splits)."""
    keys = ["block_kv", "num_warps", "num_stages", "kv_splits", "prefetch", "max_registers", *KNOBS]
    if cfg.kv_splits == 0:
        keys.append("waves")
    entry: dict[str, int | float] = {k: getattr(cfg, k) for k in keys}
    entry["ms"] = round(ms, 5)
    return entry


# one attention compile job: (preset, bucket, seq_len override, head_dim override, device, config)
CompileJob = tuple[str, str, int | None, int | None, str, AttentionConfig]
# one store compile job: (preset, device, config)
StoreJob = tuple[str, str, StoreConfig]
# the store's tokens in a compile worker: fewer than STORE_SHAPE's, the same kernels
STORE_COMPILE_TOKENS = 4096


def compile_jobs(
    presets: list[str],
    buckets: list[str],
    grid: list[AttentionConfig],
    device: str,
    seq_len: int | None = None,
    head_dim: int | None = None,
) -> list[CompileJob]:
    """Every (preset, bucket, configuration) the timed pass will run, in its order, for
    :func:`compile_in_workers`."""
    return [(p, b, seq_len, head_dim, device, cfg) for p, b in itertools.product(presets, buckets) for cfg in grid]


def store_compile_jobs(presets: list[str], device: str) -> list[StoreJob]:
    """Every (preset, store configuration) the store sweep will time (:func:`store_grid`)."""
    return [(p, device, cfg) for p in presets for cfg in store_grid(p)]


@functools.lru_cache(maxsize=1)
def _worker_case(preset: str, bucket: str, seq_len: int | None, head_dim: int | None, device: str) -> bench.Case:
    # one batch per worker at a time: consecutive jobs share it, and GPU memory holds one
    _, shape = swept_case(bucket, seq_len, head_dim)
    return bench.build_case(shape, preset, torch.device(device), seed=0)


@functools.lru_cache(maxsize=1)
def _worker_store(preset: str, device: str) -> tuple:
    n, h, d = STORE_COMPILE_TOKENS, *STORE_SHAPE[1:]
    dev = torch.device(device)
    k, v, slots = bench.store_inputs(n, h, d, dev, seed=0)
    return k, v, slots, bench.store_cache(preset, n, h, d, dev), bench.store_extra(preset, n, h, d, dev)


def compile_one(job: CompileJob | StoreJob) -> str | None:
    """Run one configuration once (so Triton compiles its kernels into the disk cache): an
    attention job on its bucket's batch, a store job (three fields) on a small batch of the
    store sweep's shape. The error text where it fails (the timed pass records it), else None."""
    try:
        if len(job) == 3:
            preset, device, scfg = job
            k, v, slots, cache, extra = _worker_store(preset, device)
            store(k, v, cache, slots, preset, config=scfg, **extra)
        else:
            preset, bucket, seq_len, head_dim, device, cfg = job
            bench.run_tq(_worker_case(preset, bucket, seq_len, head_dim, device), config=cfg)
        kind = torch.device(device).type
        if kind != "cpu":
            getattr(torch, kind).synchronize()
    except Exception as exc:  # a config may not compile (resources): the timed pass says so
        return str(exc)[:200]
    return None


def compile_in_workers(jobs: list[CompileJob | StoreJob], workers: int) -> int:
    """Compile ``jobs`` in ``workers`` spawned processes (each job runs once, its time is not
    kept); returns how many failed. Jobs go out in order in chunks, so that a worker runs
    consecutive configurations of one batch."""
    ctx = multiprocessing.get_context("spawn")
    chunk = max(1, len(jobs) // (4 * workers))
    failed = 0
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        for err in progress(pool.map(compile_one, jobs, chunksize=chunk), len(jobs), "compile"):
            failed += err is not None
    return failed


def run(args: argparse.Namespace) -> int:
    presets, buckets = args.presets, args.buckets
    cases = {b: swept_case(b, args.seq_len, args.head_dim) for b in buckets}  # usage errors before the device
    grid = attention_grid(
        args.block_kv,
        args.warps,
        args.modes,
        args.splits,
        args.max_registers,
        args.waves,
        **{k: getattr(args, k) for k in KNOBS},
    )
    dev = gpu_device()
    name = device_key(dev)
    if args.compile_jobs > 1:
        jobs: list[CompileJob | StoreJob] = list(
            compile_jobs(presets, buckets, grid, str(dev), args.seq_len, args.head_dim)
        )
        if not args.no_store:
            jobs += store_compile_jobs(presets, str(dev))
        failed = compile_in_workers(jobs, args.compile_jobs)
        if failed:
            print(f"compile: {failed} of {len(jobs)} configurations failed in the workers", file=sys.stderr)
    table: dict = {
        "device": name,
        "match": [name],
        "source": {
            "command": "tq " + " ".join(sys.argv[1:]),
            "date": utc_timestamp(),
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
        },
        "complete": False,
        "store": {},
        "attention": {},
        "measurements": [],
    }
    out = args.out or (tuning.user_table_dir() / f"{_slug(name)}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    # the launchers read every *.json of the tuning directory: an unfinished table goes beside it
    partial = out.with_name(out.name + ".partial")
    print(f"measurements so far go to {partial} until the sweep ends", file=sys.stderr)
    jobs = list(itertools.product(presets, buckets))
    for preset, swept in progress(jobs, len(jobs), "attention"):
        bucket, shape = cases[swept]
        case = bench.build_case(shape, preset, dev, seed=0)
        best: tuple[float, AttentionConfig] | None = None
        for cfg in grid:
            try:
                t = bench.time_ms(lambda case=case, cfg=cfg: bench.run_tq(case, config=cfg), warmup=10, rep=40)
            except Exception as exc:  # a config may not compile (resources): record and go on
                table["measurements"].append(
                    {"preset": preset, "bucket": bucket, **asdict(cfg), "error": str(exc)[:200]}
                )
                continue
            table["measurements"].append({"preset": preset, "bucket": bucket, **asdict(cfg), "ms": round(t, 5)})
            if best is None or t < best[0]:
                best = (t, cfg)
        del case
        torch.cuda.empty_cache() if dev.type == "cuda" else None
        if best is not None:
            entry = table_entry(best[1], best[0])
            sec = table["attention"].setdefault(preset, {})
            sec[bucket] = entry
            # the verify bucket also serves the buckets nobody swept (a rows entry serves only its rows)
            if ":" not in bucket and (bucket == "q8" or "*" not in sec):
                sec["*"] = dict(entry)
        # after every preset and bucket: a sweep stopped part way keeps what it measured
        write_json(partial, table)
    if not args.no_store:
        _sweep_store(table, presets, dev)
    table["complete"] = True
    write_json(out, table)
    partial.unlink(missing_ok=True)
    tuning.clear_cache()
    print(f"wrote {out}")
    for preset, sec in table["attention"].items():
        for bucket, e in sec.items():
            if bucket != "*":
                print(f"  {preset:20} {bucket:4} {e}")
    return 0


def store_grid(preset: str) -> list[StoreConfig]:
    """The store configurations ``tq sweep`` times for ``preset``: programs of 16-64 tokens
    over 2-8 warps and, for formats that search a codebook (all but fp8 keys with uniform
    values), codes by binary search (``code_search`` 1) and from uniform bins (2)."""
    p = get_preset(preset)
    searches = (0,) if p.key_is_fp8 and not p.calibrated else (1, 2)
    return [
        StoreConfig(block_t=bt, num_warps=w, code_search=cs)
        for bt, w, cs in itertools.product((16, 32, 64), (2, 4, 8), searches)
    ]


# the store sweep's batch: tokens, kv heads, head dim (the store kernel's integer arguments
# specialise the same way for any token count that is a multiple of 16)
STORE_SHAPE = (1 << 18, 8, 128)


def _sweep_store(table: dict, presets: list[str], dev: torch.device, shape: tuple[int, int, int] = STORE_SHAPE) -> None:
    n, h, d = shape
    k, v, slots = bench.store_inputs(n, h, d, dev, seed=0)
    for preset in progress(presets, len(presets), "store"):
        cache = bench.store_cache(preset, n, h, d, dev)
        # a calibrated format's store needs a calibration and the tokens' positions
        extra = bench.store_extra(preset, n, h, d, dev)
        best = None
        for cfg in store_grid(preset):
            t = bench.time_ms(
                lambda cfg=cfg, cache=cache, preset=preset, extra=extra: store(
                    k, v, cache, slots, preset, config=cfg, **extra
                ),
                warmup=5,
                rep=20,
            )
            if best is None or t < best[0]:
                best = (t, cfg)
        entry = {"block_t": best[1].block_t, "num_warps": best[1].num_warps}
        if best[1].code_search:
            entry["code_search"] = best[1].code_search
        table["store"][preset] = {**entry, "ms": round(best[0], 5)}
