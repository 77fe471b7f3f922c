"""Kernel selection and the two attention paths the backend runs (pure torch, no vLLM).

- :func:`select_kernels`: ``tq_triton`` (imported lazily, cuda/xpu) or ``tq_core``
  (CPU, or anywhere with ``TQ_VLLM_IMPL=core``); both expose the same ``store`` and
  ``attention``.
- :func:`run_decode`: the one ``attention`` call of a :class:`~tq_vllm.plan.DecodePlan`.
- :func:`run_chunk`: a prompt chunk attends to its own K/V un-quantized and to the
  dequantized cached prefix (standard causal softmax attention, torch SDPA).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import tq_core
from tq_core import BackendUnavailableError, BlockLayout, Preset
from tq_core.paged import read_fields

from . import _env
from .plan import BatchPlan, ChunkPlan, DecodePlan

TRITON_MAX_Q_LEN = 16
CORE_MAX_Q_LEN = 1
GPU_DEVICE_TYPES = ("cuda", "xpu")


@dataclass(frozen=True)
class Kernels:
    """One implementation of the tq API."""

    name: str
    store: Callable[..., None]
    attention: Callable[..., torch.Tensor]
    max_q_len: int | None  # longest q_len per (sub-)request handed to one attention call (None: any)
    takes_max_query_len: bool = False  # attention(..., max_query_len=) tile-shape hint


def select_kernels(device: torch.device | str, choice: str | None = None) -> Kernels:
    """The kernels for ``device``; ``choice`` is ``auto`` / ``triton`` / ``core`` (default: TQ_VLLM_IMPL)."""
    dev = torch.device(device).type
    choice = choice or _env.impl_choice()
    if choice == "auto":
        choice = "triton" if dev in GPU_DEVICE_TYPES else "core"
    if choice == "core":
        # One query per sub-request: tq-core's float32 matmuls round differently for
        # different q_len, so verify rows are fed as q_len=1 pieces (with their causal
        # seq_len) and reproduce plain decoding bit for bit. Still one attention call.
        return Kernels("tq_core", tq_core.store, tq_core.attention, CORE_MAX_Q_LEN)
    if choice != "triton":
        raise ValueError(f"kernel choice {choice!r}: expected 'auto', 'triton' or 'core'")
    if dev not in GPU_DEVICE_TYPES and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailableError(
            f"TQ_VLLM_IMPL=triton on device type {dev!r}: tq-triton runs on cuda and xpu, "
            "or on CPU under TRITON_INTERPRET=1 (set before start-up)"
        )
    try:
        tq_triton = importlib.import_module("tq_triton")
        store, attention = tq_triton.store, tq_triton.attention
    except (ImportError, AttributeError) as e:
        raise BackendUnavailableError(
            f"tq-vllm runs turboquant_* attention on {dev} with tq-triton, which is not usable here ({e}). "
            "Install it (pip install tq-triton, or pip install 'tq-vllm[triton]'), set TQ_VLLM_IMPL=core for "
            "tq-core's slow reference path, or TQ_VLLM_DISABLE=1 for vLLM's own TurboQuant backend"
        ) from e
    limit = getattr(tq_triton, "MAX_QUERY_LEN", TRITON_MAX_Q_LEN)
    hint = "max_query_len" in inspect.signature(attention).parameters
    return Kernels("tq_triton", store, attention, int(limit), hint)


def tq_cache_view(kv_cache: torch.Tensor) -> torch.Tensor:
    """vLLM's per-layer view ``[num_blocks, num_kv_heads, block_size, slot]`` as tq's
    ``[num_blocks, block_size, num_kv_heads, slot]`` (a view; the block bytes are tq's)."""
    return kv_cache.transpose(1, 2)


def run_decode(
    kernels: Kernels,
    plan: DecodePlan,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    preset: Preset,
    scale: float,
    output: torch.Tensor,
) -> None:
    """One ``attention`` call for every decode/verify request of the batch."""
    kw = {"max_query_len": plan.max_q_len} if kernels.takes_max_query_len else {}
    if plan.token_index is None:
        n = plan.num_tokens
        kernels.attention(
            query[:n],
            kv_cache,
            plan.block_table,
            plan.seq_lens,
            plan.query_start_loc,
            preset,
            scale,
            out=output[:n],
            **kw,
        )
        return
    q = query.index_select(0, plan.token_index)
    o = kernels.attention(q, kv_cache, plan.block_table, plan.seq_lens, plan.query_start_loc, preset, scale, **kw)
    output.index_copy_(0, plan.token_index, o.to(output.dtype))


@functools.lru_cache(maxsize=64)
def _layout(preset: Preset, head_dim: int, block_size: int, num_kv_heads: int) -> BlockLayout:
    return preset.block_layout(head_dim, block_size, num_kv_heads)


def dequantize_prefix(
    kv_cache: torch.Tensor, block_row: torch.Tensor, length: int, preset: Preset, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V (float32 ``[length, num_kv_heads, head_dim]``) of a request's first ``length`` cached tokens."""
    _, bs, hk, _ = kv_cache.shape
    views = tq_core.block_fields(kv_cache, _layout(preset, head_dim, bs, hk))
    pos = torch.arange(length, device=kv_cache.device)
    blocks = block_row.long()[pos // bs]
    return tq_core.decode_fields(read_fields(views, blocks, pos % bs), preset, head_dim)


def run_chunk(
    chunk: ChunkPlan,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    preset: Preset,
    scale: float,
    output: torch.Tensor,
) -> None:
    """Causal attention of one prompt chunk: raw K/V of its own tokens, dequantized cached prefix."""
    a, b = chunk.q_start, chunk.q_end
    q_len, ctx = chunk.q_len, chunk.context_len
    hq, d = query.shape[1], query.shape[2]
    hk = key.shape[1]
    # CPU: float32 throughout; GPUs: the model dtype, for the fused SDPA kernels
    cdt = torch.float32 if query.device.type == "cpu" else query.dtype
    k, v = key[a:b].to(cdt), value[a:b].to(cdt)
    if ctx > 0:
        kp, vp = dequantize_prefix(kv_cache, block_table[chunk.req], ctx, preset, d)
        k = torch.cat([kp.to(cdt), k])
        v = torch.cat([vp.to(cdt), v])
    group = hq // hk
    q = query[a:b].to(cdt).transpose(0, 1)  # [Hq, q_len, d]
    k = k.transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, S, d]
    v = v.transpose(0, 1).repeat_interleave(group, dim=0)
    qpos = ctx + torch.arange(q_len, device=query.device)
    kpos = torch.arange(ctx + q_len, device=query.device)
    mask = kpos[None, :] <= qpos[:, None]
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    output[a:b] = o.transpose(0, 1).to(output.dtype)


def run_batch(
    kernels: Kernels,
    plan: BatchPlan,
    query: torch.Tensor,
    key: torch.Tensor | None,
    value: torch.Tensor | None,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    preset: Preset,
    scale: float,
    output: torch.Tensor,
) -> None:
    """Attention for a whole planned batch (``kv_cache`` in tq's view, see :func:`tq_cache_view`).

    ``query``/``output`` ``[num_tokens, Hq, d]``, ``key``/``value`` ``[num_tokens, Hk, d]``
    (the step's new, un-quantized K/V; needed only for prompt chunks).
    """
    if plan.decode is not None:
        run_decode(kernels, plan.decode, query, kv_cache, preset, scale, output)
    if plan.chunks:
        if key is None or value is None:
            raise ValueError("prompt chunks need the step's key and value")
        for chunk in plan.chunks:
            run_chunk(chunk, query, key, value, kv_cache, block_table, preset, scale, output)
