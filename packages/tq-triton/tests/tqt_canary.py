"""Canary helpers of the memory-safety tests: views inside larger tensors filled with a known
pattern, so that a write (or, for fp16 fields of 0xFF bytes, a read) outside the view shows."""

from __future__ import annotations

import torch

import tq_core
from tq_core.testing import PagedBatch

# 0xFF bytes are NaN as fp16 scales and norms and as fp8 keys: a read of them poisons the row
CACHE_FILL = 0xFF
OUT_FILL = 1234.5
PAD = 2


class Canary:
    """A view of ``shape`` at offset ``PAD`` (dim 0) inside a tensor filled with ``fill``."""

    def __init__(self, inner: torch.Tensor, fill: float) -> None:
        n = inner.shape[0]
        self.outer = torch.full((n + 2 * PAD, *inner.shape[1:]), fill, dtype=inner.dtype, device=inner.device)
        self.view = self.outer[PAD : PAD + n]
        self.view.copy_(inner)
        self.before = self.outer.clone()

    def assert_outside_unchanged(self) -> None:
        n = self.view.shape[0]
        for part, name in ((slice(0, PAD), "before"), (slice(PAD + n, None), "after")):
            assert torch.equal(self.outer[part], self.before[part]), f"bytes {name} the view changed"


def cache_canary(cache: torch.Tensor) -> Canary:
    return Canary(cache, CACHE_FILL)


def out_canary(query: torch.Tensor, dtype: torch.dtype = torch.float32) -> Canary:
    return Canary(torch.full(query.shape, OUT_FILL, dtype=dtype, device=query.device), OUT_FILL)


def request_reference(
    b: PagedBatch, r: int, seq_len: int, rows: tuple[int, int], block_table: torch.Tensor | None = None
) -> torch.Tensor:
    """``tq_core.attention`` of request ``r`` alone: query rows ``rows`` over ``seq_len`` positions
    of its row of ``block_table`` (the batch's by default), float32."""
    q0, q1 = rows
    dev = b.query.device
    row = (b.block_table if block_table is None else block_table)[r].reshape(1, -1).contiguous().to(dev)
    return tq_core.attention(
        b.query[q0:q1].float(),
        b.kv_cache,
        row,
        torch.tensor([seq_len], dtype=torch.int32, device=dev),
        torch.tensor([0, q1 - q0], dtype=torch.int32, device=dev),
        b.preset,
        b.scale,
        **b.extra(),
    )


def fill_free_slots(b: PagedBatch, gen: torch.Generator) -> PagedBatch:
    """Store random tokens (``tq_core.store``) into every slot of ``b``'s cache that no request
    uses, so that any block a bad or foreign block id points at holds finite data: a NaN in
    the output can then only come from bytes outside the cache. Returns ``b``."""
    num_blocks, block_size, heads, _ = b.kv_cache.shape
    d = b.query.shape[-1]
    used = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    used[b.slot_mapping.cpu()] = True
    free = torch.nonzero(~used).flatten()
    dev = b.kv_cache.device
    k = torch.randn(free.numel(), heads, d, generator=gen).to(dev)
    v = torch.randn(free.numel(), heads, d, generator=gen).to(dev)
    extra = {}
    if b.calibration is not None:  # the free slots' tokens, all past position 0
        extra = {"calibration": b.calibration, "positions": torch.ones(free.numel(), dtype=torch.int64, device=dev)}
    tq_core.store(k, v, b.kv_cache, free.to(dev), b.preset, **extra)
    return b
