"""Compile tq-triton's kernels for an Intel Xe2 GPU to SPIR-V, without the GPU.

Run by the ``xpu_compile`` nox session (nox_sessions/xpu.py) in an environment with Intel's
Triton (``triton-xpu``), ``intel-sycl-rt`` (its headers and ``libsycl.so`` build the backend's
small helper modules), a CPU torch, Level Zero's loader and headers (``libze1``, ``libze-dev``)
and ``CC=g++``. ``triton.compile`` runs the Intel backend's whole pipeline (TTIR, TTGIR, LLVM
IR, SPIR-V) for ``GPUTarget("xpu", XE2_PROPS, 16)``; nothing is run and no native (zebin) code
is generated, so register counts and spills are not known here: ``ocloc`` would report them.

Every kernel the xpu path launches is compiled, with the launch parameters the launchers
would pass on an Xe2 card: ``_store_kernel`` (store.py) per preset and head_dim,
``attention_kernel`` per preset, head_dim, GQA group and q bucket 1..16 (tile rows from
``attention.plan.plan_block_q``, launch parameters from the shipped Xe2 tuning table the way
``attention.plan.plan_config`` reads it, kv splits 1 and more than 1), and ``merge_kernel``
per head_dim. The xpu launch options of the table (``grf_mode``) are passed as the Intel
backend reads them. Checks: every compile succeeds; every ``tt.dot`` of the attention kernel's
TTGIR produces a ``#triton_intel_gpu.dpas`` layout; no LLVM inline assembly (cuda-only PTX)
reaches the LLVM IR. Prints one table row per distinct compile; exits 1 on any failure.

``python -m tq_triton.xpu_compile [--quick] [--only REGEX]``
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

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
HEAD_DIMS = (64, 128, 256)
GROUPS = (1, 4, 8)  # q heads per kv head (GQA); G_PAD is the next power of two
QUERY_LENS = (1, 2, 4, 8, 16)  # one per q bucket q1..q16
BLOCK_SIZE = 16  # tokens per cache block (vLLM's default)
NUM_KV_HEADS = 8
MULTI_SPLITS = 8  # a kv split count > 1 (the kernel only branches on 1 vs more)
INPUT_DTYPE = "bf16"

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

    def key(self) -> tuple[Any, ...]:
        return (self.kernel, tuple(sorted(self.constexprs.items())), tuple(sorted(self.options.items())))


@dataclass
class Result:
    job: Job
    seconds: float = 0.0
    error: str = ""
    dots: int = 0
    dpas_dots: int = 0
    inline_asm: int = 0
    spirv_bytes: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error and self.inline_asm == 0 and (not self.job.needs_dpas or self.dpas_dots == self.dots > 0)


def _signature(arg_names: list[str], constexprs: dict[str, Any], types: dict[str, str]) -> dict[str, str]:
    return {n: ("constexpr" if n in constexprs else types.get(n, "i32")) for n in arg_names}


def xe2_table() -> dict[str, Any]:
    """The shipped table whose ``match`` list names the Xe2 device (user tables are skipped)."""
    from . import tuning

    table = tuning.table_for(XE2_DEVICE_NAME)
    if table is None or "xe2" not in table["_path"]:
        raise SystemExit(f"no shipped tuning table matches {XE2_DEVICE_NAME!r}: {table and table['_path']}")
    return table


def attention_cfg(preset: str, query_len: int) -> Any:
    """What ``attention.plan.plan_config`` returns on an Xe2 card (no environment overrides)."""
    from .tuning import _attention_cached, q_bucket

    return _attention_cached(XE2_DEVICE_NAME, preset, q_bucket(query_len), ())


def jobs(quick: bool) -> Iterator[Job]:
    import tq_core

    from .attention.kernel import attention_kernel, merge_kernel
    from .attention.launch import kernel_constexprs
    from .attention.plan import next_pow2, plan_block_q
    from .store import _store_kernel
    from .tuning import _store_cached

    table = xe2_table()
    xpu_opts = dict(table.get("xpu_launch_options", {}))
    presets = list(tq_core.PRESETS)
    head_dims = (128,) if quick else HEAD_DIMS
    groups = (4,) if quick else GROUPS
    for name in presets:
        p = tq_core.get_preset(name)
        for d in head_dims:
            fields = p.kernel_fields(p.block_layout(d, BLOCK_SIZE, NUM_KV_HEADS)).constexprs()
            scfg = _store_cached(XE2_DEVICE_NAME, name)
            scx = dict(fields, NUM_BOUNDS=0 if p.key_is_fp8 else (1 << p.key_bits) - 1, BLOCK_T=scfg.block_t)
            scx["stride_sm"] = 1
            stypes = {"K": f"*{INPUT_DTYPE}", "V": f"*{INPUT_DTYPE}", "Cache": "*u8", "SlotMapping": "*i64"}
            stypes["Bounds"] = "*fp32"
            yield Job(
                "store",
                f"{name} d{d}",
                _store_kernel,
                _signature(_store_kernel.arg_names, scx, stypes),
                scx,
                dict(num_warps=scfg.num_warps, **xpu_opts),
            )
            for g in groups:
                g_pad = next_pow2(g)
                for qlen in QUERY_LENS:
                    cfg = attention_cfg(name, qlen)
                    block_q = plan_block_q(g_pad, qlen)
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
                            "Centroids": "*fp32" if p.key_is_fp8 else "*fp16",
                            "Out": f"*{INPUT_DTYPE}",
                            "Partial": "*fp32",
                            "Lse": "*fp32",
                            "sm_scale": "fp32",
                        }
                        yield Job(
                            "attention",
                            f"{name} d{d} g{g} q{qlen} s{splits}",
                            attention_kernel,
                            _signature(attention_kernel.arg_names, cx, types),
                            cx,
                            dict(num_warps=cfg.num_warps, **xpu_opts),
                            needs_dpas=True,
                        )
    for d in head_dims:
        splits = attention_cfg(presets[0], 1).max_kv_splits
        mcx = dict(NUM_Q_HEADS=4 * NUM_KV_HEADS, NUM_SPLITS=splits, SPLITS_PAD=next_pow2(splits), D=d, stride_qs=1)
        mtypes = {"Partial": "*fp32", "Lse": "*fp32", "Out": f"*{INPUT_DTYPE}", "QueryStart": "*i32"}
        yield Job(
            "merge",
            f"d{d} s{splits}",
            merge_kernel,
            _signature(merge_kernel.arg_names, mcx, mtypes),
            mcx,
            dict(num_warps=4, **xpu_opts),
        )


def _explain(exc: BaseException) -> str:
    """The innermost cause first (e.g. ``AssertionError: Input shapes should have M >= 8``), then
    the source location Triton reports and the tail of the traceback."""
    root = exc
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    where = str(exc).strip().splitlines()
    tail = "".join(traceback.format_exception(exc)[-12:])
    return f"{type(root).__name__}: {root}\n{type(exc).__name__} {where[0] if where else ''}\n{tail}"


def compile_one(job: Job) -> Result:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    res = Result(job)
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


GRF = {
    "-cl-intel-256-GRF-per-thread": "large",
    "-cl-intel-128-GRF-per-thread": "small",
    "-cl-intel-enable-auto-large-GRF-mode": "auto",
    "": "default",
}


def _row(r: Result) -> str:
    c = r.job.constexprs
    if r.job.kernel == "attention":
        shape = f"M={c['BLOCK_Q'] * c['G_PAD']:<3} kv={c['BLOCK_KV']:<3}"
    elif r.job.kernel == "store":
        shape = f"T={c['BLOCK_T']:<14}"
    else:
        shape = f"splits={c['NUM_SPLITS']:<9}"
    if r.error:
        stat = "COMPILE FAILED"
    else:
        grf = GRF.get(r.meta["build_flags"], r.meta["build_flags"])
        dots = f"{r.dpas_dots}/{r.dots}" if r.dots else "-"
        regs = r.meta.get("n_regs", "n/a")
        stat = (
            f"grf={grf:<5} warps={r.meta['num_warps']} stages={r.meta['num_stages']} slm={r.meta['shared']:<6}"
            f" dpas={dots:<4} spv={r.spirv_bytes // 1024:>4}KB regs/spills={regs}"
        )
        if r.inline_asm:
            stat += f" INLINE-ASM x{r.inline_asm}"
        elif r.job.needs_dpas and not r.ok:
            stat += " NO-DPAS"
    first = r.labels[0]
    more = f" (+{len(r.labels) - 1})" if len(r.labels) > 1 else ""
    return f"{r.job.kernel:<9} {first + more:<44} {shape} {stat} {r.seconds:5.1f}s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="head_dim 128 and GQA group 4 only")
    ap.add_argument("--only", default="", help="compile only launches whose label matches this regex")
    args = ap.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)
    import triton

    print(f"triton {triton.__version__}; target xpu {XE2_DEVICE_NAME}, sub-group {WARP_SIZE}; SPIR-V only")
    with tempfile.TemporaryDirectory() as empty:
        os.environ["TQ_TUNING_DIR"] = empty  # the shipped tables only, never a user's measured one
        from . import tuning

        tuning.clear_cache()
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    distinct: dict[tuple[Any, ...], Result] = {}
    order: list[Result] = []
    t0 = time.monotonic()
    for job in jobs(args.quick):
        if args.only and not re.search(args.only, f"{job.kernel} {job.label}"):
            continue
        key = job.key()
        if key in distinct:
            distinct[key].labels.append(job.label)
            continue
        res = compile_one(job)
        res.labels.append(job.label)
        distinct[key] = res
        order.append(res)
        print(_row(res), flush=True)
    bad = [r for r in order if not r.ok]
    launches = sum(len(r.labels) for r in order)
    print(f"\n{len(order)} distinct compiles for {launches} launch configurations in {time.monotonic() - t0:.0f}s")
    for r in bad:
        why = r.error or (f"{r.inline_asm} inline asm call(s) in the LLVM IR" if r.inline_asm else "")
        why = why or f"{r.dpas_dots} of {r.dots} tt.dot results in a #triton_intel_gpu.dpas layout"
        print(f"\nFAILED {r.job.kernel} {', '.join(r.labels)}:\n{why}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} of {len(order)} compiles failed their checks", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
