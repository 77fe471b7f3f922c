"""tq_triton's kernels as torch operators: ``torch.ops.tq.store``, ``torch.ops.tq.attention``
and ``torch.ops.tq.attention_out``, with fake implementations for tracing and compilation."""

from __future__ import annotations

import torch

from .attention import attention as _attention
from .store import store as _store


@torch.library.custom_op("tq::store", mutates_args=("kv_cache",))
def store_op(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, preset: str
) -> None:
    _store(key, value, kv_cache, slot_mapping, preset)


@store_op.register_fake
def _(key, value, kv_cache, slot_mapping, preset) -> None:
    return None


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
    return None
