"""The explicit-layout kernel's (``gluon_kernel``) launch, and its compile for an NVIDIA
target without a GPU (tests). Where it applies is the launch plan's decision
(``attention.plan.gluon_refusal``)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import tq_core


@functools.cache
def _gluon_params() -> frozenset[str]:
    from .gluon_kernel import gluon_attention_kernel

    return frozenset(gluon_attention_kernel.arg_names)


def launch_gluon(
    grid: tuple[int, int, int],
    args: tuple,
    constexprs: dict[str, object],
    options: dict[str, Any] | None = None,
    wgmma: bool = False,
) -> bool:
    """``gluon_kernel.gluon_attention_kernel`` on ``grid`` with the Triton kernel's
    positional ``args`` and the plan's constexprs (``plan.kernel_constexprs``; those that
    are not its parameters are left out); ``options``: launch options (``maxnreg``); ``wgmma``:
    Hopper's warpgroup products (the kernel's ``WGMMA``: 64 rows, sm_90 only, see
    ``plan.wgmma_applies``). Returns False,
    having launched nothing, where the compiled kernel needs more shared memory than the
    device allows per block (Triton's ``OutOfResources``, raised before the launch; e.g. a
    head_dim of 256 on a GPU with 99 KB per block): the caller then runs the portable
    kernel. That answer is remembered per device and specialisation."""
    from triton.runtime.errors import OutOfResources

    from .gluon_kernel import gluon_attention_kernel

    names = _gluon_params()
    cx = {k: v for k, v in constexprs.items() if k in names}
    warps = cx["BLOCK_Q"] * cx["G_PAD"] // 16
    opts = options or {}

    def key() -> tuple:
        return (str(args[0].device), tuple(sorted(cx.items())), wgmma, tuple(sorted(opts.items())))

    # the key is built only once some specialisation has not fitted (not per launch)
    if _TOO_LARGE and key() in _TOO_LARGE:
        return False
    try:
        gluon_attention_kernel[grid](*args, **cx, WARPS=warps, WGMMA=wgmma, num_warps=warps, **opts)
    except OutOfResources:
        _TOO_LARGE.add(key())
        return False
    return True


# specialisations that did not fit their device (see launch_gluon)
_TOO_LARGE: set[tuple] = set()


@functools.cache
def _token_rows_params() -> frozenset[str]:
    from .token_rows_kernel import token_rows_attention_kernel

    return frozenset(token_rows_attention_kernel.arg_names)


def launch_token_rows(
    grid: tuple[int, int, int], args: tuple, constexprs: dict[str, object], options: dict[str, Any] | None = None
) -> None:
    """``token_rows_kernel.token_rows_attention_kernel`` on ``grid`` (one warp per program)
    with the Gluon kernel's positional ``args`` (the calibration pointers and the value
    codebook's register table last) and the plan's constexprs (those that are not its
    parameters are left out)."""
    from .token_rows_kernel import token_rows_attention_kernel

    names = _token_rows_params()
    cx = {k: v for k, v in constexprs.items() if k in names}
    token_rows_attention_kernel[grid](*args, **cx, num_warps=1, **(options or {}))


def compile_token_rows(
    preset: str,
    group: int,
    block_kv: int,
    splits: int,
    sm: int = 90,
    maxnreg: int = 0,
    balance: bool = False,
    columns: int = 8,
) -> Any:
    """The token-rows kernel compiled without a GPU for an NVIDIA target ``sm``, as the
    launcher specialises it (head_dim 128, 2 kv heads, 16-token blocks, ``columns`` query
    columns: 8 or 16; tq_k4v4's symmetric values
    from their codes' bits, as every launch decodes them), as :func:`compile_gluon` compiles the Gluon kernel."""
    from .token_rows_kernel import token_rows_attention_kernel

    p = tq_core.get_preset(preset)
    g_pad = 1 << max(0, group - 1).bit_length()
    consts = dict(
        p.kernel_fields(p.block_layout(128, 16, 2)).constexprs(),
        G=group,
        G_PAD=g_pad,
        NUM_Q_HEADS=2 * group,
        NUM_SPLITS=splits,
        BLOCK_Q=columns // g_pad,
        BLOCK_KV=block_kv,
        NORM_CORRECTION=p.norm_correction,
        SATURATE_QUERY=False,
        BALANCE=balance,
        SKIP_EMPTY=False,
        INT_VALUES=p.value_kind == "symmetric",
        CALIBRATED=p.calibrated,
    )
    return _compile(token_rows_attention_kernel, consts, 1, sm, maxnreg)


def compile_gluon(
    preset: str,
    group: int,
    block_q: int,
    block_kv: int,
    head_dim: int,
    splits: int,
    sm: int = 90,
    maxnreg: int = 0,
    balance: bool = False,
    wgmma: bool = False,
    skip_empty: bool = False,
) -> Any:
    """The kernel compiled without a GPU for an NVIDIA target ``sm`` (default 90: H100/H200), as
    the launcher specialises it (group a power of two; 2 kv heads, 16-token blocks) and
    Triton's compiled kernel returns it (``.asm["ptx"]``, ``.asm["cubin"]``). ``maxnreg``:
    a register cap per thread, as ``max_registers`` passes it (0: none); ``balance``: kv
    splits sized from the batch's lengths (``BALANCE``, ``AttentionConfig.split_budget``);
    ``wgmma``: Hopper's warpgroup products (``WGMMA``; 64 rows); ``skip_empty``: empty kv
    splits skipped (``SKIP_EMPTY``, ``AttentionConfig.skip_empty``); tq_k4v4's values are
    decoded from their codes' bits (``INT_VALUES``), as every launch does. Not under
    ``TRITON_INTERPRET=1``, where Gluon functions cannot compile."""
    from .gluon_kernel import gluon_attention_kernel

    p = tq_core.get_preset(preset)
    warps = group * block_q // 16
    consts = dict(
        p.kernel_fields(p.block_layout(head_dim, 16, 2)).constexprs(),
        G=group,
        G_PAD=group,
        NUM_Q_HEADS=2 * group,
        NUM_SPLITS=splits,
        BLOCK_Q=block_q,
        BLOCK_KV=block_kv,
        NORM_CORRECTION=p.norm_correction,
        CALIBRATED=p.calibrated,
        SATURATE_QUERY=False,
        WARPS=warps,
        BALANCE=balance,
        WGMMA=wgmma,
        SKIP_EMPTY=skip_empty,
        INT_VALUES=p.value_kind == "symmetric",
    )
    return _compile(gluon_attention_kernel, consts, warps, sm, maxnreg)


# the kernels' pointer and float arguments (every other non-constexpr argument is an int32)
_ARG_TYPES = {"Q": "*bf16", "Cache": "*u8", "Out": "*bf16", "Partial": "*fp32", "Lse": "*fp32", "Centroids": "*fp32"}
_ARG_TYPES |= dict.fromkeys(("KeyGain", "KeyOffset", "KeyFirstOffset", "ValueGain", "ValueOffset"), "*fp32")
_ARG_TYPES |= {"ValueFirstOffset": "*fp32", "VCentroids": "*i32"}
_ARG_TYPES |= {"q_mul": "fp32", "q_scale": "fp32", "stride_blk": "i64"}
_ARG_TYPES |= dict.fromkeys(("BlockTable", "SeqLens", "QueryStart"), "*i32")


def _compile(kernel: Any, consts: dict[str, object], warps: int, sm: int, maxnreg: int) -> Any:
    """``kernel`` (a Gluon attention kernel) compiled for NVIDIA target ``sm`` with the
    constexprs ``consts``, as the launcher specialises it: 16-byte aligned pointers, strides
    divisible by 16."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig, cx, attrs = {}, {}, {}
    for i, name in enumerate(inspect.signature(kernel.fn).parameters):
        if name in consts:
            sig[name] = "constexpr"
            cx[(i,)] = consts[name]
            continue
        sig[name] = _ARG_TYPES.get(name, "i32")
        if sig[name].startswith("*") or name.startswith("stride"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn=kernel, signature=sig, constexprs=cx, attrs=attrs)
    return triton.compile(
        src, target=GPUTarget("cuda", sm, 32), options={"num_warps": warps} | ({"maxnreg": maxnreg} if maxnreg else {})
    )
