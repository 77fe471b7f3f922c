"""The argument dict every compiled implementation takes (see csrc/bindings/params_from_dict.hpp).

A call is validated once, by tq_core's ``check_attention_args`` (metadata values where
:func:`checks_values` says); ``prepare()`` takes that result, normalises the tensors the
kernels read (int32 metadata, last dim contiguous) and records raw pointers, strides and
tq-core's layout fields (:class:`tq_core.contract.KernelFields`, copied, never derived
here). The returned
:class:`PreparedCall` keeps every tensor it points into alive.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from tq_core import LayerCalibration, RangeError, key_codebook, value_codebook
from tq_core.contract import AttentionArgs, KernelFields, debug_enabled

# element dtype codes shared with csrc/include/tq/numeric.hpp
DTYPE_CODES: dict[torch.dtype, int] = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
ROWS_PER_TILE = 16  # csrc/include/tq/params.hpp kRowsPerTile
MAX_SPLITS = 256
# KernelFields the C++ side reads (csrc/bindings/params_from_dict.hpp), under the same names
FIELD_NAMES = (
    "head_dim",
    "block_size",
    "head_stride",
    "key_fp8",
    "key_bits",
    "value_bits",
    "norm_correction",
    "key_offset",
    "key_width",
    "norm_offset",
    "value_offset",
    "value_width",
    "scale_offset",
    "zero_offset",
)


@dataclass
class PreparedCall:
    """A validated call: ``args`` for the C++ side, the tensors it points into, and the output."""

    args: dict[str, Any]
    checked: AttentionArgs
    query: torch.Tensor
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    # the cached table the kernels read, shared by every call: not handed out (``centroids``)
    _centroids: torch.Tensor | None
    out: torch.Tensor  # what the kernel writes (contiguous in its last dim)
    result: torch.Tensor  # what the caller gets back (``out`` or the caller's tensor)
    keep: list[torch.Tensor] = field(default_factory=list)

    @property
    def centroids(self) -> torch.Tensor | None:
        """A copy of the centroid table the call points to (None for fp8 keys): writing into
        it cannot change this or any later call's result."""
        return None if self._centroids is None else self._centroids.clone()

    def finish(self) -> torch.Tensor:
        """Copies into the caller's ``out`` where the kernel wrote a stand-in; returns it."""
        if self.out is not self.result:
            self.result.copy_(self.out)
        return self.result


@functools.cache
def _centroids(preset_name: str, head_dim: int, device: str) -> torch.Tensor:
    cent, _ = key_codebook(preset_name, head_dim, device)
    return cent.contiguous()


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _int32(t: torch.Tensor) -> torch.Tensor:
    # a no-op (no copy, no launch) when vLLM already passes int32 contiguous metadata
    return t.to(torch.int32).contiguous()


def checks_values(query: object) -> bool:
    """Whether a call checks metadata values (``check_attention_args(check_values=)``):
    for CPU tensors always, elsewhere with ``TQ_DEBUG=1`` only, since the checks read
    device memory and the device path must never sync."""
    return (isinstance(query, torch.Tensor) and query.device.type == "cpu") or debug_enabled()


def check_num_splits(num_splits: object) -> int:
    """``num_splits`` as an int in ``1..MAX_SPLITS``, else :class:`RangeError` naming it."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 1 <= num_splits <= MAX_SPLITS:
        raise RangeError(f"num_splits={num_splits!r}: expected an int in 1..{MAX_SPLITS}")
    return num_splits


def field_args(fields: KernelFields) -> dict[str, int]:
    """The layout and preset fields of the argument dict, as tq-core computed them."""
    return {name: int(getattr(fields, name)) for name in FIELD_NAMES}


def prepare(
    checked: AttentionArgs,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    out: torch.Tensor | None,
    num_splits: int,
    calibration: LayerCalibration | None = None,
) -> PreparedCall:
    """The argument dict of a call ``check_attention_args`` accepted (``checked`` is its result);
    a calibrated format's ``calibration`` goes in as one float32 ``[6, num_kv_heads, head_dim]``
    tensor (csrc/include/tq/params.hpp) beside its value codebook."""
    check_num_splits(num_splits)
    p = checked.preset
    q = _last_dim_contiguous(query)
    result = out if out is not None else torch.empty_like(query)
    kernel_out = result if result.stride(-1) == 1 else torch.empty_like(result, memory_format=torch.contiguous_format)
    bt, sl, qsl = _int32(block_table), _int32(seq_lens), _int32(query_start_loc)
    cent = None if p.key_is_fp8 else _centroids(p.name, checked.head_dim, str(query.device))
    args: dict[str, Any] = {
        "query": q.data_ptr(),
        "query_dtype": DTYPE_CODES[q.dtype],
        "q_stride_token": q.stride(0),
        "q_stride_head": q.stride(1),
        "out": kernel_out.data_ptr(),
        "out_dtype": DTYPE_CODES[kernel_out.dtype],
        "o_stride_token": kernel_out.stride(0),
        "o_stride_head": kernel_out.stride(1),
        "cache": kv_cache.data_ptr(),
        "cache_block_stride": kv_cache.stride(0),
        "num_blocks": kv_cache.shape[0],
        "block_table": bt.data_ptr(),
        "bt_stride": bt.stride(0),
        "bt_cols": bt.shape[1],
        "seq_lens": sl.data_ptr(),
        "query_start_loc": qsl.data_ptr(),
        "num_reqs": checked.num_reqs,
        "num_q_tokens": q.shape[0],
        "num_q_heads": checked.num_q_heads,
        "num_kv_heads": checked.num_kv_heads,
        **field_args(checked.fields),
        "centroids": 0 if cent is None else cent.data_ptr(),
        "scale": float(scale),
        "num_splits": num_splits,
        "rows_per_tile": ROWS_PER_TILE,
        "calibrated": int(p.calibrated),
    }
    keep: list[torch.Tensor] = []
    if p.calibrated:
        assert calibration is not None  # check_attention_args requires it
        cal = torch.stack(calibration.kernel_vectors()).to(query.device, torch.float32).contiguous()
        vcent = value_codebook(p, checked.head_dim, query.device)[0].contiguous()
        keep += [cal, vcent]
        args.update(calibration=cal.data_ptr(), value_centroids=vcent.data_ptr())
    return PreparedCall(args, checked, q, kv_cache, bt, sl, qsl, cent, kernel_out, result, keep)
