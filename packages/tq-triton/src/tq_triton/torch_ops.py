"""tq_triton's kernels as torch operators: ``torch.ops.tq.store``, ``torch.ops.tq.attention``
and ``torch.ops.tq.attention_out``, with fake implementations for tracing and compilation.
They take vLLM's four formats; tq's calibrated formats (a calibration per layer) go through
the functions ``tq_triton.store`` and ``tq_triton.attention``.

The operators pass their tensors on unchanged, so index tensors are read through their
strides as by the functions. The fake implementations check that every tensor is on one
device (shapes may be symbolic there, so the other checks wait for the real call): they
are also what the dispatcher picks when any argument is a meta tensor, so tensors on
mixed devices (meta and cpu) raise ``DeviceError`` instead of returning an uninitialised
tensor.
"""

from __future__ import annotations

import torch

from tq_core import DeviceError

from .attention import attention as _attention
from .store import store as _store


@torch.library.custom_op("tq::store", mutates_args=("kv_cache",))
def store_op(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, preset: str
) -> None:
    _store(key, value, kv_cache, slot_mapping, preset)


@store_op.register_fake
def _(key, value, kv_cache, slot_mapping, preset) -> None:
    _one_device(key=key, value=value, kv_cache=kv_cache, slot_mapping=slot_mapping)


@torch.library.custom_op("tq::attention", mutates_args=())
def attention_op(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    preset: str,
    scale: float,
) -> torch.Tensor:
    return _attention(query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale)


@attention_op.register_fake
def _(query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale) -> torch.Tensor:
    _one_device(
        query=query, kv_cache=kv_cache, block_table=block_table, seq_lens=seq_lens, query_start_loc=query_start_loc
    )
    return torch.empty_like(query)


@torch.library.custom_op("tq::attention_out", mutates_args=("out",))
def attention_out_op(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    preset: str,
    scale: float,
    out: torch.Tensor,
) -> None:
    _attention(query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale, out=out)


@attention_out_op.register_fake
def _(query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale, out) -> None:
    _one_device(
        query=query,
        kv_cache=kv_cache,
        block_table=block_table,
        seq_lens=seq_lens,
        query_start_loc=query_start_loc,
        out=out,
    )


def _one_device(**tensors: torch.Tensor) -> None:
    """Raise ``DeviceError`` unless every tensor is on the first one's device."""
    (first, dev), *rest = ((name, t.device) for name, t in tensors.items())
    for name, d in rest:
        if d != dev:
            raise DeviceError(f"{name}: is on {d}, expected {first}'s device {dev} (all tensors on one device)")
