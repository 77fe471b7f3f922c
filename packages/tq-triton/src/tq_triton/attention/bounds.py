"""One program's share of the metadata, clamped: the request's sequence, query rows and kv
split. Written once, compiled by both attention kernels (``kernel``: Triton; ``gluon_kernel``:
Gluon), because these clamps are what keeps any metadata value from addressing memory
outside the tensors (``launch.attention`` documents the results)."""

from __future__ import annotations

import triton
import triton.language as tl


def request_bounds_fn(
    SeqLens,
    QueryStart,
    stride_sl,
    stride_qs,
    bt_cap,
    num_query_rows,
    chunk,
    NUM_SPLITS: tl.constexpr,
    BLOCK_KV: tl.constexpr,
    BALANCE: tl.constexpr,
):
    """``(seq_len, q_start, q_len, kv_lo, kv_hi)`` of this program's request and kv split
    (program ids 0 and 2): its seq_len clamped to ``[0, bt_cap]`` (the block table's
    capacity); its query rows
    inside ``[0, rows)``, where ``rows`` is ``query_start_loc[num_reqs]`` clamped to
    ``[0, num_query_rows]``, so even a non-monotone ``query_start_loc`` stays inside; the
    split's share of the sequence ``[kv_lo, kv_hi)`` in whole tiles: the sequence divided
    evenly over ``NUM_SPLITS``, or with ``BALANCE`` over ``cdiv(seq_len, chunk)`` splits
    (:func:`balanced_chunk_fn`; the splits after those are empty). Clamped in int64 (the
    index tensors may be int64), then narrowed. Scalar operations only, so that Triton and
    Gluon compile the same function."""
    r = tl.program_id(0)
    split = tl.program_id(2)
    seq_len = tl.load(SeqLens + r * stride_sl).to(tl.int64)
    seq_len = tl.minimum(tl.maximum(seq_len, 0), bt_cap).to(tl.int32)
    num_reqs = tl.num_programs(0)
    rows = tl.minimum(tl.maximum(tl.load(QueryStart + num_reqs * stride_qs).to(tl.int64), 0), num_query_rows)
    q_start = tl.minimum(tl.maximum(tl.load(QueryStart + r * stride_qs).to(tl.int64), 0), rows)
    q_end = tl.minimum(tl.maximum(tl.load(QueryStart + (r + 1) * stride_qs).to(tl.int64), q_start), rows)
    q_start = q_start.to(tl.int32)
    q_len = q_end.to(tl.int32) - q_start
    if BALANCE:
        # the request takes n = cdiv(seq_len, chunk) splits and deals its tiles out evenly:
        # each split gets floor or ceil of tiles / n (a last split of a few tiles would hold
        # up its wave); splits from n on are empty. In int64: split x tiles can pass 2^31
        seq = seq_len.to(tl.int64)
        tiles = tl.cdiv(seq, BLOCK_KV)
        n = tl.maximum(tl.cdiv(seq, chunk), 1)
        kv_lo = tl.minimum((split * tiles // n) * BLOCK_KV, seq).to(tl.int32)
        kv_hi = tl.minimum(((split + 1) * tiles // n) * BLOCK_KV, seq).to(tl.int32)
    else:
        per_split = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_KV) * BLOCK_KV
        kv_lo = split * per_split
        kv_hi = tl.minimum(kv_lo + per_split, seq_len)
    return seq_len, q_start, q_len, kv_lo, kv_hi


def balanced_chunk_fn(total, longest, bt_cap, programs, NUM_SPLITS: tl.constexpr, BLOCK_KV: tl.constexpr):
    """The most positions one kv split takes, for the whole batch (``BALANCE``): ``total``
    is the batch's summed (clamped) sequence lengths and ``longest`` its longest, both
    int64. A request of
    ``n`` positions takes ``cdiv(n, chunk)`` splits, and over the batch's requests and kv
    heads these fill at most ``programs`` programs (one wave) where that is possible: each
    request rounds up by less than one split, so ``total / (programs - pairs)`` positions
    per split are enough (:func:`request_bounds_fn` then deals each request's tiles out
    evenly over its splits). The chunk is at least ``cdiv(longest, NUM_SPLITS)`` (no request
    needs more splits than the grid has) and one tile, at most the block table's capacity
    ``bt_cap`` rounded up to whole tiles; int64. Scalar operations only (see :func:`request_bounds_fn`)."""
    heads = tl.num_programs(1).to(tl.int64)
    spare = tl.maximum(programs - tl.num_programs(0).to(tl.int64) * heads, 1)
    chunk = tl.maximum(tl.cdiv(total * heads, spare), tl.cdiv(longest, NUM_SPLITS))
    chunk = tl.minimum(chunk, bt_cap)
    return tl.maximum(tl.cdiv(chunk, BLOCK_KV), 1) * BLOCK_KV


request_bounds = triton.jit(request_bounds_fn)
balanced_chunk_jit = triton.jit(balanced_chunk_fn)


@triton.jit
def balanced_chunk(SeqLens, stride_sl, bt_cap, programs, NUM_SPLITS: tl.constexpr, BLOCK_KV: tl.constexpr):
    """:func:`balanced_chunk_fn` of the batch's sequence lengths, each clamped to
    ``[0, bt_cap]`` as :func:`request_bounds_fn` clamps it (Triton; the Gluon kernel has
    its own loads, in its layouts)."""
    BLOCK_R: tl.constexpr = 128
    num_reqs = tl.num_programs(0)
    total = tl.zeros([], tl.int64)
    longest = tl.zeros([], tl.int64)
    for i in range(0, num_reqs, BLOCK_R):
        idx = i + tl.arange(0, BLOCK_R)
        sl = tl.load(SeqLens + idx.to(tl.int64) * stride_sl, mask=idx < num_reqs, other=0).to(tl.int64)
        sl = tl.minimum(tl.maximum(sl, 0), bt_cap)
        total += tl.sum(sl, axis=0)
        longest = tl.maximum(longest, tl.max(sl, axis=0))
    return balanced_chunk_jit(total, longest, bt_cap, programs, NUM_SPLITS, BLOCK_KV)
