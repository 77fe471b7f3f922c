"""Compile tq-triton's kernels for an Intel Xe2 GPU to SPIR-V, without the GPU.

A test tool, not part of the tq-triton wheel: run as a script (``python
nox_sessions/xpu_compile_check.py``) by the ``xpu_compile`` and ``xpu_compile-full`` nox
sessions (nox_sessions/xpu.py) in an environment with Intel's
Triton (``triton-xpu``), ``intel-sycl-rt`` (its headers and ``libsycl.so`` build the backend's
small helper modules), a CPU torch, Level Zero's loader and headers (``libze1``, ``libze-dev``)
and ``CC=g++``. ``triton.compile`` runs the Intel backend's whole pipeline (TTIR, TTGIR, LLVM
IR, SPIR-V) for ``GPUTarget("xpu", XE2_PROPS, 16)``; nothing is run and no native (zebin) code
is generated, so register counts and spills are not known here: ``ocloc`` would report them.

Every kernel the xpu path launches is compiled, with the launch parameters the launchers
would pass on an Xe2 card: ``_store_kernel`` (store.py) per preset and head_dim,
``attention_kernel`` per preset, head_dim, GQA group and q bucket 1..16 (tile rows from
``attention.plan.plan_block_q``, launch parameters from the shipped Xe2 tuning table the way
``attention.plan.plan_attention`` reads it, kv splits 1 and more than 1), and ``merge_kernel``
per head_dim. The xpu launch options of the table (``grf_mode``) are passed as the Intel
backend reads them. Checks: every compile succeeds; every ``tt.dot`` of the attention kernel's
TTGIR produces a ``#triton_intel_gpu.dpas`` layout; no LLVM inline assembly (cuda-only PTX)
reaches the LLVM IR; each compile's shared local memory fits an Xe2 work-group (128 KiB).
The distinct compiles run in a pool of ``--jobs`` processes (default: every CPU,
``TQ_XPU_COMPILE_JOBS`` overrides); a line per compile is printed as it finishes, then one
table row per distinct compile in job order. Exits 1 on any failure.

``--cover`` compiles a representative subset instead of the whole matrix: a greedy cover of
the distinct compiles in which each kernel meets each preset, head_dim, block size, GQA group,
q bucket, kv split kind (1, more), tile row count, resolved Xe2 table configuration and variant
at least once, not their product (``xpu_compile`` runs it; ``xpu_compile-full`` the whole matrix).

``python nox_sessions/xpu_compile_check.py [--cover] [--quick] [--knobs] [--only REGEX] [--list] [--jobs N]``
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Hashable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path, and it holds the nox session
# modules triton.py and vllm.py, which would shadow the real packages: drop it (pool processes
# inherit the trimmed path).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]

# The properties Intel's backend reads from a device (triton/backends/intel/compiler.py,
# XPUBackend.parse_target, min_dot_size, make_ttgir). The values are Battlemage G21's (Arc B580):
# sub-groups of 16 and 32, DPAS and 2D block loads, bf16 conversions, no fp64. ``architecture``
# is sycl::ext::oneapi::experimental::architecture::intel_gpu_bmg_g21 (device_architecture.def);
# the backend uses it only to ask ``ocloc`` for the device's extensions when ocloc is installed.
XE2_DEVICE_NAME = "Intel(R) Arc(TM) B580 Graphics"
XE2_PROPS: dict[str, Any] = {
    "name": XE2_DEVICE_NAME,
    "architecture": 0x0000000500400400,
    "sub_group_sizes": [16, 32],
    "has_subgroup_matrix_multiply_accumulate": True,
    "has_subgroup_matrix_multiply_accumulate_tensor_float32": False,
    "has_subgroup_2d_block_io": True,
    "has_bfloat16_conversions": True,
    "has_fp64": False,
    "max_work_group_size": 1024,
    "max_num_sub_groups": 64,
}
WARP_SIZE = 16  # Triton's threads_per_warp = the sub-group size DPAS runs with on Xe2
# Shared local memory one work-group may allocate on Xe2: 128 KiB. Intel's compute runtime
# (github.com/intel/compute-runtime) sets ``maxProgrammableSlmSize = 128`` (KiB) for both Xe2
# products, Battlemage (shared/source/xe2_hpg_core/hw_info_bmg.cpp) and Lunar Lake
# (hw_info_lnl.cpp), and reports it as the device's local memory size
# (shared/source/device/device_caps.cpp: ``localMemSize = maxProgrammableSlmSize * KB``), i.e.
# CL_DEVICE_LOCAL_MEM_SIZE and SYCL's ``local_mem_size``, the per-work-group limit a launch
# is checked against. Triton's ``shared`` metadata is that allocation for one program.
XE2_SLM_BYTES = 128 * 1024
JOBS_ENV = "TQ_XPU_COMPILE_JOBS"
MAX_CRASHES = 3  # pool processes that may die in a row before the remaining jobs are given up
HEAD_DIMS = (64, 128, 256)
GROUPS = (1, 4, 8)  # q heads per kv head (GQA); G_PAD is the next power of two
QUERY_LENS = (1, 2, 4, 8, 16)  # one per q bucket q1..q16
# tokens per cache block: vLLM's default, and a block that holds whole tiles (the attention
# kernel then reads one block id per tile: attention/tile.tile_block_ids), at head_dim 128
# only (the id's code does not depend on the head dim)
BLOCK_SIZES = (16, 64)
NUM_KV_HEADS = 8
MULTI_SPLITS = 8  # a kv split count > 1 (the kernel only branches on 1 vs more)
INPUT_DTYPE = "bf16"
# the calibration vectors the store and attention kernels read for tq's calibrated formats
CALIBRATION_ARGS = ("KeyGain", "KeyOffset", "KeyFirstOffset", "ValueGain", "ValueOffset", "ValueFirstOffset")

DPAS_ALIAS = re.compile(r"^(#\w+) = #triton_intel_gpu\.dpas<", re.M)
DOT_RESULT = re.compile(r"tt\.dot .*-> tensor<[^>]*, (#\w+)>")
INLINE_ASM = re.compile(r"\basm\s+(sideeffect\s+)?\"")


@dataclass
class Job:
    kernel: str  # attention, store, merge
    label: str  # which launches it stands for
    fn: Any
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any]
    needs_dpas: bool = False
    # what the launch stands for in --cover: (kernel, axis, value) triples
    covers: frozenset[Hashable] = frozenset()

    @classmethod
    def of(
        cls, kernel: str, label: str, fn: Any, constexprs: dict[str, Any], types: dict[str, str], options: dict, **kw
    ) -> Job:
        """A launch of ``fn`` whose arguments not in ``constexprs`` have ``types`` (default i32)."""
        return cls(kernel, label, fn, _signature(fn.arg_names, constexprs, types), constexprs, options, **kw)

    def key(self) -> tuple[Any, ...]:
        """Launches with the same key compile to the same kernel: the same constexprs, options
        and argument types (a pointer's element type, e.g. bf16 partial outputs, changes the
        code as a constexpr does)."""
        return (
            self.kernel,
            tuple(sorted(self.constexprs.items())),
            tuple(sorted(self.options.items())),
            tuple(sorted(self.signature.items())),
        )


@dataclass
class Compiled:
    """What one compile reports: plain data, so that it comes back from a pool process."""

    seconds: float = 0.0
    error: str = ""
    dots: int = 0
    dpas_dots: int = 0
    inline_asm: int = 0
    spirv_bytes: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    job: Job
    out: Compiled = field(default_factory=Compiled)
    labels: list[str] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)  # every launch merged into this compile

    @property
    def slm_ok(self) -> bool:
        return int(self.out.meta.get("shared") or 0) <= XE2_SLM_BYTES

    @property
    def dpas_ok(self) -> bool:
        return not self.job.needs_dpas or self.out.dpas_dots == self.out.dots > 0

    @property
    def ok(self) -> bool:
        return not self.out.error and self.out.inline_asm == 0 and self.dpas_ok and self.slm_ok

    def why(self) -> str:
        """Every check this compile failed, one per line ("" when it passed)."""
        o = self.out
        if o.error:
            return o.error
        why = [f"{o.inline_asm} inline asm call(s) in the LLVM IR"] if o.inline_asm else []
        if not self.dpas_ok:
            why.append(f"{o.dpas_dots} of {o.dots} tt.dot results in a #triton_intel_gpu.dpas layout")
        if not self.slm_ok:
            why.append(f"shared local memory {o.meta['shared']} bytes > {XE2_SLM_BYTES} (Xe2's per-work-group limit)")
        return "\n".join(why)


def _signature(arg_names: list[str], constexprs: dict[str, Any], types: dict[str, str]) -> dict[str, str]:
    return {n: ("constexpr" if n in constexprs else types.get(n, "i32")) for n in arg_names}


def xe2_table() -> dict[str, Any]:
    """The shipped table whose ``match`` list names the Xe2 device (user tables are skipped)."""
    from tq_triton import tuning

    table = tuning.table_for(XE2_DEVICE_NAME)
    if table is None or "xe2" not in table["_path"]:
        raise SystemExit(f"no shipped tuning table matches {XE2_DEVICE_NAME!r}: {table and table['_path']}")
    return table


def attention_cfg(preset: str, query_len: int, rows: int = 0, head_dim: int = 0) -> Any:
    """What ``attention.plan.plan_attention`` looks up on an Xe2 card for tiles of ``rows``
    query rows and this head dimension (no environment overrides)."""
    from tq_triton.tuning import _attention_cached, q_bucket

    return _attention_cached(XE2_DEVICE_NAME, preset, q_bucket(query_len), (), rows, head_dim)


def jobs(quick: bool, knobs: bool = False) -> Iterator[Job]:
    """Every launch to compile. ``knobs``: also each attention launch with the knobs on that
    the xpu path does not use by default (``BALANCE``, ``split_budget``'s split sizes, and
    ``SKIP_EMPTY``, ``skip_empty``, where the launch has kv splits), and the merge kernel with
    ``SKIP_EMPTY``. tq_k4v4's symmetric values are decoded from their bits (``INT_VALUES``) in
    every launch. 4-bit codebook keys are looked up in the register tables of ``key_lut``
    (``KEY_LUT`` as the plan sets it), whose pointer is then int32; 3-bit codes read
    ``key_poly``'s fp16 constants."""
    import tq_core
    from tq_triton.attention.kernel import MERGE_WARPS, attention_kernel, merge_kernel
    from tq_triton.attention.plan import kernel_constexprs, next_pow2, plan_block_q
    from tq_triton.store import _store_kernel
    from tq_triton.store import kernel_constexprs as store_constexprs
    from tq_triton.tuning import _store_cached, q_bucket

    table = xe2_table()
    xpu_opts = dict(table.get("xpu_launch_options", {}))
    presets = list(tq_core.PRESETS)
    head_dims = (128,) if quick else HEAD_DIMS
    for name in presets + list(tq_core.CALIBRATED_PRESETS):
        p = tq_core.get_preset(name)
        # tq's calibrated formats: one GQA group (their code paths do not depend on it) and
        # the q buckets of 16, 32 and 64 tile rows
        groups = (4,) if quick or p.calibrated else GROUPS
        query_lens = (1, 8, 16) if p.calibrated else QUERY_LENS
        for d, bs in itertools.product(head_dims, BLOCK_SIZES):
            if bs != BLOCK_SIZES[0] and d != 128:
                continue
            fields = p.kernel_fields(p.block_layout(d, bs, NUM_KV_HEADS)).constexprs()
            scfg = _store_cached(XE2_DEVICE_NAME, name, ())
            # the store's own compile-time arguments (every knob at the table's value)
            scx = store_constexprs(p, fields, scfg) | {"stride_sm": 1}
            stypes = {"K": f"*{INPUT_DTYPE}", "V": f"*{INPUT_DTYPE}", "Cache": "*u8", "SlotMapping": "*i64"}
            tables = ("Bounds", "VBounds", "KCentroids", "VCentroids", *CALIBRATION_ARGS)
            stypes |= dict.fromkeys(tables, "*fp32") | {"Positions": "*i64"}
            if scfg.code_search == 2:
                stypes |= {"Bounds": "*i64", "VBounds": "*i64"}  # code_bins' int64 tables
            yield Job.of(
                "store",
                f"{name} d{d} b{bs}",
                _store_kernel,
                scx,
                stypes,
                dict(num_warps=scfg.num_warps, **xpu_opts),
                covers=_axes("store", preset=name, d=d, block_size=bs, table=astuple(scfg)),
            )
            for g in groups:
                g_pad = next_pow2(g)
                for qlen in query_lens:
                    cfg = attention_cfg(name, qlen, plan_block_q(g_pad, qlen) * g_pad, d)
                    block_q = plan_block_q(g_pad, qlen, cfg.min_rows)
                    for splits in (1, MULTI_SPLITS):
                        cx = kernel_constexprs(p, fields, cfg, g, g * NUM_KV_HEADS, splits, block_q)
                        for n in ("stride_bc", "stride_sl", "stride_qs"):
                            cx[n] = 1  # index tensors are contiguous: Triton specialises a stride of 1
                        types = {
                            "Q": f"*{INPUT_DTYPE}",
                            "Cache": "*u8",
                            "BlockTable": "*i32",
                            "SeqLens": "*i32",
                            "QueryStart": "*i32",
                            "Centroids": "*fp32" if p.key_is_fp8 else ("*i32" if cx["KEY_LUT"] else "*fp16"),
                            "Out": f"*{INPUT_DTYPE}",
                            "Partial": "*fp32",
                            "Lse": "*fp32",
                            "q_mul": "fp32",
                            "q_scale": "fp32",
                            "VCentroids": "*fp16",
                        }
                        types |= dict.fromkeys(CALIBRATION_ARGS, "*fp32")
                        variants = [("", cx, types)]
                        if knobs:
                            kcx = dict(cx, BALANCE=splits > 1, SKIP_EMPTY=splits > 1)
                            variants.append((" knobs", kcx, types))
                        for suffix, vcx, vtypes in variants:
                            yield Job.of(
                                "attention",
                                f"{name} d{d} b{bs} g{g} q{qlen} s{splits}{suffix}",
                                attention_kernel,
                                vcx,
                                vtypes,
                                dict(num_warps=cfg.num_warps, **xpu_opts),
                                needs_dpas=True,
                                covers=_axes(
                                    "attention",
                                    preset=name,
                                    d=d,
                                    group=g,
                                    block_size=bs,
                                    bucket=q_bucket(qlen),
                                    splits="1" if splits == 1 else ">1",
                                    rows=block_q * g_pad,
                                    table=astuple(cfg),
                                    # each preset with one kv split and more, as is and with knobs
                                    variant=(name, splits > 1, suffix),
                                    # the cache layout, and the tile shape (DPAS shapes,
                                    # shared local memory: the largest is d256 x 128 rows)
                                    preset_d=(name, d),
                                    d_rows=(d, block_q * g_pad),
                                ),
                            )
    for d in head_dims:
        splits = attention_cfg(presets[0], 1).max_kv_splits
        mtypes = {"Partial": "*fp32", "Lse": "*fp32", "Out": f"*{INPUT_DTYPE}", "QueryStart": "*i32"}
        # VALUE_COLUMNS: partial outputs in 4-bit values' column order (the launcher sets it
        # after the Gluon kernel); with knobs, empty splits skipped too (skip_empty)
        for columns, skip in ((False, False), (True, False), *(((False, True),) if knobs else ())):
            mcx = dict(
                NUM_Q_HEADS=4 * NUM_KV_HEADS,
                NUM_SPLITS=splits,
                SPLITS_PAD=next_pow2(splits),
                D=d,
                VALUE_COLUMNS=columns,
                SKIP_EMPTY=skip,
                stride_qs=1,
            )
            yield Job.of(
                "merge",
                f"d{d} s{splits}{' value_columns' if columns else ''}{' skip_empty (knobs)' if skip else ''}",
                merge_kernel,
                mcx,
                mtypes,
                dict(num_warps=MERGE_WARPS, **xpu_opts),
                covers=_axes("merge", d=d, columns=columns, skip=skip),
            )


def _axes(kernel: str, **values: Any) -> frozenset[Hashable]:
    """The (kernel, axis, value) triples a launch covers; the kernel alone is one too."""
    return frozenset({(kernel, "kernel", kernel), *((kernel, axis, v) for axis, v in values.items())})


def cover(todo: list[tuple[int, Result]]) -> list[tuple[int, Result]]:
    """A greedy cover of the distinct compiles (job order kept): repeatedly the compile whose
    launches cover the most (kernel, axis, value) triples not yet covered, the first such in job
    order, until each triple is covered by at least one compile."""
    covers = [frozenset().union(*(j.covers for j in r.jobs)) for _, r in todo]
    uncovered = set().union(*covers)
    keep: set[int] = set()
    while uncovered:
        best = max(range(len(todo)), key=lambda i: (len(covers[i] & uncovered), -i))
        keep.add(best)
        uncovered -= covers[best]
    return [ir for i, ir in enumerate(todo) if i in keep]


def _explain(exc: BaseException) -> str:
    """The innermost cause first (e.g. ``AssertionError: Input shapes should have M >= 8``), then
    the source location Triton reports and the tail of the traceback."""
    root = exc
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    where = str(exc).strip().splitlines()
    tail = "".join(traceback.format_exception(exc)[-12:])
    return f"{type(root).__name__}: {root}\n{type(exc).__name__} {where[0] if where else ''}\n{tail}"


def compile_one(job: Job) -> Compiled:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    res = Compiled()
    t0 = time.monotonic()
    try:
        k = triton.compile(
            ASTSource(job.fn, job.signature, job.constexprs),
            target=GPUTarget("xpu", XE2_PROPS, WARP_SIZE),
            options=job.options,
        )
    except Exception as exc:  # every compile error is reported, not raised
        res.error = _explain(exc)
        res.seconds = time.monotonic() - t0
        return res
    res.seconds = time.monotonic() - t0
    ttgir = k.asm["ttgir"]
    dpas = set(DPAS_ALIAS.findall(ttgir))
    layouts = DOT_RESULT.findall(ttgir)
    res.dots = len(layouts)
    res.dpas_dots = sum(1 for lay in layouts if lay in dpas)
    res.inline_asm = len(INLINE_ASM.findall(k.asm["llir"]))
    res.spirv_bytes = len(k.asm["spv"])
    md = k.metadata._asdict()
    res.meta = {n: md.get(n) for n in ("build_flags", "shared", "threads_per_warp", "num_warps", "num_stages")}
    for n in ("n_regs", "n_spills", "spills"):
        if n in md:
            res.meta[n] = md[n]
    return res


def _setup_env(tuning_dir: str) -> None:
    """The environment every compile runs in, in this process and in each pool process: Triton
    compiles for real (no interpreter), and only the shipped tuning tables are read (never a
    user's measured one), with the tuning cache cleared after the switch."""
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TQ_TUNING_DIR"] = tuning_dir
    from tq_triton import tuning

    tuning.clear_cache()


_POOL_JOBS: list[Job] = []  # a pool process's own copy of jobs(quick, knobs), built once


def _pool_init(quick: bool, knobs: bool, tuning_dir: str) -> None:
    _setup_env(tuning_dir)
    # the kernels (JITFunction) do not cross processes: each pool process enumerates the same
    # jobs and the parent sends an index, checked against the job's key
    _POOL_JOBS[:] = jobs(quick, knobs)


def _pool_compile(index: int, key: tuple[Any, ...]) -> Compiled:
    job = _POOL_JOBS[index]
    if job.key() != key:
        raise RuntimeError(f"job {index} differs between processes: {job.kernel} {job.label}")
    return compile_one(job)


GRF = {
    "-cl-intel-256-GRF-per-thread": "large",
    "-cl-intel-128-GRF-per-thread": "small",
    "-cl-intel-enable-auto-large-GRF-mode": "auto",
    "": "default",
}


def _row(r: Result) -> str:
    c, o = r.job.constexprs, r.out
    if r.job.kernel == "attention":
        shape = f"M={c['BLOCK_Q'] * c['G_PAD']:<3} kv={c['BLOCK_KV']:<3}"
    elif r.job.kernel == "store":
        shape = f"T={c['BLOCK_T']:<14}"
    else:
        shape = f"splits={c['NUM_SPLITS']:<9}"
    if o.error:
        stat = "COMPILE FAILED"
    else:
        grf = GRF.get(o.meta["build_flags"], o.meta["build_flags"])
        dots = f"{o.dpas_dots}/{o.dots}" if o.dots else "-"
        regs = o.meta.get("n_regs", "n/a")
        stat = (
            f"grf={grf:<5} warps={o.meta['num_warps']} stages={o.meta['num_stages']} slm={o.meta['shared']:<6}"
            f" dpas={dots:<4} spv={o.spirv_bytes // 1024:>4}KB regs/spills={regs}"
        )
        if o.inline_asm:
            stat += f" INLINE-ASM x{o.inline_asm}"
        if not r.dpas_ok:
            stat += " NO-DPAS"
        if not r.slm_ok:
            stat += " SLM-OVER-LIMIT"
    return f"{r.job.kernel:<9} {_labels(r):<44} {shape} {stat} {o.seconds:5.1f}s"


def _labels(r: Result) -> str:
    more = f" (+{len(r.labels) - 1})" if len(r.labels) > 1 else ""
    return r.labels[0] + more


def jobs_default() -> int:
    """$TQ_XPU_COMPILE_JOBS, else every CPU."""
    raw = os.environ.get(JOBS_ENV, "")
    if not raw:
        return os.cpu_count() or 1
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"{JOBS_ENV}={raw!r}: expected a whole number >= 1")
    return int(raw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    switches = (
        ("--quick", "head_dim 128 and GQA group 4 only"),
        (
            "--cover",
            "a representative subset: each preset, head_dim, block size, GQA group, q bucket, kv split kind, "
            "tile row count and Xe2 table configuration at least once per kernel (a greedy cover, not the product)",
        ),
        (
            "--knobs",
            "also compile each attention launch with the knobs on that xpu does not use by default (split_budget "
            "and skip_empty where there are kv splits, with their merge kernel)",
        ),
        ("--list", "print the compiles it would run, compile none"),
    )
    for flag, what in switches:
        ap.add_argument(flag, action="store_true", help=what)
    ap.add_argument("--only", default="", help="compile only launches whose label matches this regex")
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"compile in this many processes (default: ${JOBS_ENV}, else the number of CPUs)",
    )
    args = ap.parse_args(argv)
    if args.jobs is None:
        args.jobs = jobs_default()
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    os.environ.pop("TRITON_INTERPRET", None)
    import triton

    print(f"triton {triton.__version__}; target xpu {XE2_DEVICE_NAME}, sub-group {WARP_SIZE}; SPIR-V only")
    with tempfile.TemporaryDirectory() as empty:
        _setup_env(empty)
        return _list(args) if args.list else _run(args, empty)


def _list(args: argparse.Namespace) -> int:
    todo = _distinct(args)
    for _, r in todo:
        print(f"{r.job.kernel:<9} {', '.join(r.labels)}")
    print(f"{len(todo)} distinct compiles for {sum(len(r.labels) for _, r in todo)} launch configurations")
    return 0 if todo else 1


def _distinct(args: argparse.Namespace) -> list[tuple[int, Result]]:
    """The launches to compile, merged by key (identical constexprs and options compile once),
    in job order, each with the index of its first job in ``jobs(args.quick, args.knobs)``;
    with ``--cover``, only a cover of them (:func:`cover`)."""
    distinct: dict[tuple[Any, ...], tuple[int, Result]] = {}
    for index, job in enumerate(jobs(args.quick, args.knobs)):
        if args.only and not re.search(args.only, f"{job.kernel} {job.label}"):
            continue
        key = job.key()
        if key not in distinct:
            distinct[key] = (index, Result(job))
        distinct[key][1].labels.append(job.label)
        distinct[key][1].jobs.append(job)
    todo = list(distinct.values())
    return cover(todo) if args.cover else todo


def _compile_all(todo: list[tuple[int, Result]], args: argparse.Namespace, tuning_dir: str) -> None:
    """Fills each Result's ``out``, printing a line as each compile finishes."""
    width = len(str(len(todo)))
    done = 0

    def finished(r: Result) -> None:
        nonlocal done
        done += 1
        stat = "ok" if r.ok else "FAILED: " + r.why().splitlines()[0][:160]
        print(
            f"[{done:>{width}}/{len(todo)}] {r.job.kernel:<9} {_labels(r):<44} {r.out.seconds:5.1f}s {stat}", flush=True
        )

    workers = min(args.jobs, len(todo))
    if workers <= 1:
        for _, r in todo:
            r.out = compile_one(r.job)
            finished(r)
        return
    # "spawn": each pool process starts a fresh interpreter (no forked copy of a parent that
    # has already loaded Triton, LLVM and torch) and is set up by _pool_init like main()
    ctx = multiprocessing.get_context("spawn")
    setup = dict(mp_context=ctx, initializer=_pool_init, initargs=(args.quick, args.knobs, tuning_dir))
    retry: list[tuple[int, Result]] = []
    with ProcessPoolExecutor(workers, **setup) as pool:
        futs: dict[Future[Compiled], tuple[int, Result]] = {
            pool.submit(_pool_compile, index, r.job.key()): (index, r) for index, r in todo
        }
        for fut in as_completed(futs):
            index, r = futs[fut]
            try:
                r.out = fut.result()
            except BrokenProcessPool:
                retry.append((index, r))  # a process died (e.g. LLVM aborted): this or another job
                continue
            except Exception as exc:  # raised outside compile_one's own error capture
                r.out = Compiled(error=f"pool process failed: {_explain(exc)}")
            finished(r)
    # a dead process takes the whole pool down with it: the jobs it left unfinished run one
    # process each, so that the one that kills its process is named and the others still pass;
    # after MAX_CRASHES deaths in a row (a process that cannot even start) the rest are not tried
    crashes = 0
    for index, r in sorted(retry, key=lambda ir: ir[0]):
        if crashes >= MAX_CRASHES:
            r.out = Compiled(error=f"not compiled: the last {crashes} pool processes died")
        else:
            with ProcessPoolExecutor(1, **setup) as one:
                try:
                    r.out = one.submit(_pool_compile, index, r.job.key()).result()
                    crashes = 0
                except BrokenProcessPool as exc:
                    crashes += 1
                    r.out = Compiled(error=f"the compile killed its process (a crash inside Triton/LLVM): {exc}")
                except Exception as exc:
                    r.out = Compiled(error=f"pool process failed: {_explain(exc)}")
        finished(r)


def _run(args: argparse.Namespace, tuning_dir: str) -> int:
    t0 = time.monotonic()
    todo = _distinct(args)
    if not todo:
        print(f"no launch matches --only {args.only!r}", file=sys.stderr)
        return 1
    workers = min(args.jobs, len(todo))
    print(f"{len(todo)} distinct compiles, {workers} process{'es' if workers > 1 else ''}", flush=True)
    _compile_all(todo, args, tuning_dir)
    order = [r for _, r in todo]
    print()
    for r in order:
        print(_row(r))
    bad = [r for r in order if not r.ok]
    launches = sum(len(r.labels) for r in order)
    slm = max((int(r.out.meta.get("shared") or 0) for r in order), default=0)
    print(
        f"\n{len(order)} distinct compiles for {launches} launch configurations in {time.monotonic() - t0:.0f}s"
        f" ({workers} process{'es' if workers > 1 else ''}); largest shared local memory {slm} of"
        f" {XE2_SLM_BYTES} bytes"
    )
    for r in bad:
        print(f"\nFAILED {r.job.kernel} {', '.join(r.labels)}:\n{r.why()}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} of {len(order)} compiles failed their checks", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
