"""Canary helpers of the memory-safety tests: views inside larger tensors filled with a known
pattern, so that a write (or, for fp16 fields of 0xFF bytes, a read) outside the view shows."""

from __future__ import annotations

import torch
from tqt_helpers import TOL, make_batch

import tq_core
import tq_triton
from tq_core.testing import PagedBatch, assert_attention_close

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


def check_calibrated_hostile_batch(
    gen: torch.Generator,
    preset: str,
    head_dim: int,
    group: int,
    splits: int,
    device: str,
    max_query_len: int | None = None,
) -> None:
    """A calibrated batch with a block id far outside the cache, a seq_len past the block
    table and a query_start_loc past the rows, through ``tq_triton.attention``: nothing
    outside the cache or ``out`` is read or written (canary bytes around both), and the
    valid request (2) matches tq-core."""
    b = make_batch(gen, preset, [32, 20, 7], [1, 3, 2], head_dim=head_dim, num_kv_heads=1, group=group, device=device)
    fill_free_slots(b, gen)
    bt = b.block_table.clone()
    bt[0, 1] = 10**8
    sl = b.seq_lens.clone()
    sl[1] = 10**6
    qsl = b.query_start_loc.clone()
    qsl[3] = 10**9
    c, o = cache_canary(b.kv_cache), out_canary(b.query)
    tq_triton.attention(
        b.query,
        c.view,
        bt,
        sl,
        qsl,
        b.preset,
        b.scale,
        out=o.view,
        num_kv_splits=splits,
        max_query_len=max_query_len,
        **b.extra(),
    )
    c.assert_outside_unchanged()
    o.assert_outside_unchanged()
    assert torch.equal(c.view, b.kv_cache), "attention wrote into the cache"
    assert_attention_close(o.view[4:6], request_reference(b, 2, 7, (4, 6)), tol=TOL, what="request 2")
