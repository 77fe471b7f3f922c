"""Where the explicit-layout kernel (``gluon_kernel``) applies, and its launch.

The launcher asks :func:`gluon_applies` when the launch parameters ask for it
(``AttentionConfig.gluon``); a call it does not cover runs the portable Triton kernel.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

import tq_core
from tq_core import Preset

# one warp per 16 query rows, at most 4 warps
GLUON_ROWS = (16, 32, 64)
GLUON_HEAD_DIMS = (64, 128, 256)
GLUON_BLOCK_KV = (16, 32, 64)


@functools.cache
def gluon_available() -> bool:
    """Whether the installed Triton has Gluon with the Ampere matrix instruction."""
    try:
        from triton.experimental.gluon.language.nvidia.ampere import mma_v2  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def capability(device: torch.device) -> tuple[int, int]:
    """The cuda device's compute capability, (0, 0) where torch has no cuda (once per device)."""
    return torch.cuda.get_device_capability(device) if torch.cuda.is_available() else (0, 0)


def gluon_applies(
    preset: Preset, head_dim: int, rows: int, block_kv: int, block_size: int, device: torch.device, nvidia: bool
) -> bool:
    """Whether ``gluon_kernel`` computes this launch: an NVIDIA GPU (``nvidia``) of compute
    capability 8.9 or later (fp8 conversions in hardware), fp8 or 3-bit codebook keys
    (:func:`gluon_keys`) and 4-bit values, head_dim 64/128/256, tiles of 16, 32 or 64 query
    rows, 16-64 tokens, and a power-of-two block size (a tile's groups of positions then
    never straddle a block)."""
    return (
        nvidia
        and device.type == "cuda"
        and capability(device) >= (8, 9)
        and gluon_keys(preset)
        and preset.value_bits == 4
        and head_dim in GLUON_HEAD_DIMS
        and rows in GLUON_ROWS
        and block_kv in GLUON_BLOCK_KV
        and block_size > 0
        and block_size & (block_size - 1) == 0
        and gluon_available()
    )


def wgmma_applies(rows: int, device: torch.device) -> bool:
    """Whether a Gluon launch can use Hopper's warpgroup products (``AttentionConfig.gluon``
    3): a tile of 64 query rows (one warpgroup of four warps) on a GPU of compute
    capability 9.x (``wgmma`` exists only there)."""
    return rows == 64 and capability(device)[0] == 9


def gluon_keys(preset: Preset) -> bool:
    """Whether the Gluon kernel decodes the preset's keys: fp8, or 3-bit codebook codes
    (looked up in ``key_lut``'s register table, which the launcher then passes as
    ``Centroids``)."""
    return preset.key_is_fp8 or preset.key_bits == 3


@functools.cache
def _gluon_params() -> frozenset[str]:
    from .gluon_kernel import gluon_attention_kernel

    return frozenset(gluon_attention_kernel.arg_names)


def launch_gluon(
    grid: tuple[int, int, int],
    args: tuple,
    constexprs: dict[str, object],
    options: dict[str, Any] | None = None,
    buffers: int = 1,
    wgmma: bool = False,
) -> bool:
    """``gluon_kernel.gluon_attention_kernel`` on ``grid`` with the Triton kernel's
    positional ``args`` and the constexprs both kernels share (``kernel_constexprs``'
    others are not its parameters); ``options``: launch options (``maxnreg``);
    ``buffers``: shared buffers per tile (1 or 2, the kernel's ``BUFFERS``); ``wgmma``:
    Hopper's warpgroup products (the kernel's ``WGMMA``: one buffer, 64 rows, sm_90 only,
    see :func:`wgmma_applies`). Returns False,
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
        return (str(args[0].device), tuple(sorted(cx.items())), buffers, wgmma, tuple(sorted(opts.items())))

    # the key is built only once some specialisation has not fitted (not per launch)
    if _TOO_LARGE and key() in _TOO_LARGE:
        return False
    try:
        gluon_attention_kernel[grid](*args, **cx, WARPS=warps, BUFFERS=buffers, WGMMA=wgmma, num_warps=warps, **opts)
    except OutOfResources:
        _TOO_LARGE.add(key())
        return False
    return True


# specialisations that did not fit their device (see launch_gluon)
_TOO_LARGE: set[tuple] = set()


def compile_gluon(
    preset: str,
    group: int,
    block_q: int,
    block_kv: int,
    head_dim: int,
    splits: int,
    sm: int = 90,
    buffers: int = 1,
    maxnreg: int = 0,
    balance: bool = False,
    wgmma: bool = False,
    bf16_partials: bool = False,
    skip_empty: bool = False,
) -> Any:
    """The kernel compiled without a GPU for an NVIDIA target ``sm`` (default 90: H100/H200), as
    the launcher specialises it (group a power of two; 2 kv heads, 16-token blocks) and
    Triton's compiled kernel returns it (``.asm["ptx"]``, ``.asm["cubin"]``). ``maxnreg``:
    a register cap per thread, as ``max_registers`` passes it (0: none); ``balance``: kv
    splits sized from the batch's lengths (``BALANCE``, ``AttentionConfig.split_budget``);
    ``wgmma``: Hopper's warpgroup products (``WGMMA``; 64 rows, one buffer);
    ``bf16_partials``: bf16 partial outputs (``AttentionConfig.bf16_partials``);
    ``skip_empty``: empty kv splits skipped (``SKIP_EMPTY``, ``AttentionConfig.skip_empty``).
    Not under ``TRITON_INTERPRET=1``, where Gluon functions cannot compile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

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
        SATURATE_QUERY=False,
        WARPS=warps,
        BUFFERS=buffers,
        BALANCE=balance,
        WGMMA=wgmma,
        SKIP_EMPTY=skip_empty,
    )
    partial = "*bf16" if bf16_partials else "*fp32"
    types = {"Q": "*bf16", "Cache": "*u8", "Out": "*bf16", "Partial": partial, "Lse": "*fp32", "Centroids": "*fp32"}
    types |= {"q_mul": "fp32", "q_scale": "fp32", "stride_blk": "i64"}
    types |= dict.fromkeys(("BlockTable", "SeqLens", "QueryStart"), "*i32")
    sig, cx, attrs = {}, {}, {}
    for i, name in enumerate(inspect.signature(gluon_attention_kernel.fn).parameters):
        if name in consts:
            sig[name] = "constexpr"
            cx[(i,)] = consts[name]
            continue
        sig[name] = types.get(name, "i32")
        # as the launcher specialises them: 16-byte aligned pointers, strides divisible by 16
        if sig[name].startswith("*") or name.startswith("stride"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn=gluon_attention_kernel, signature=sig, constexprs=cx, attrs=attrs)
    return triton.compile(
        src, target=GPUTarget("cuda", sm, 32), options={"num_warps": warps} | ({"maxnreg": maxnreg} if maxnreg else {})
    )
