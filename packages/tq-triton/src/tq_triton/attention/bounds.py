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
    r,
    split,
    stride_sl,
    stride_qs,
    bt_cap,
    num_query_rows,
    NUM_SPLITS: tl.constexpr,
    BLOCK_KV: tl.constexpr,
):
    """``(seq_len, q_start, q_len, kv_lo, kv_hi)`` of request ``r``'s program for ``split``:
    its seq_len clamped to ``[0, bt_cap]`` (the block table's capacity); its query rows
    inside ``[0, rows)``, where ``rows`` is ``query_start_loc[num_reqs]`` clamped to
    ``[0, num_query_rows]``, so even a non-monotone ``query_start_loc`` stays inside; the
    split's share of the sequence ``[kv_lo, kv_hi)`` in whole tiles. Clamped in int64 (the
    index tensors may be int64), then narrowed. Scalar operations only, so that Triton and
    Gluon compile the same function."""
    seq_len = tl.load(SeqLens + r * stride_sl).to(tl.int64)
    seq_len = tl.minimum(tl.maximum(seq_len, 0), bt_cap).to(tl.int32)
    num_reqs = tl.num_programs(0)
    rows = tl.minimum(tl.maximum(tl.load(QueryStart + num_reqs * stride_qs).to(tl.int64), 0), num_query_rows)
    q_start = tl.minimum(tl.maximum(tl.load(QueryStart + r * stride_qs).to(tl.int64), 0), rows)
    q_end = tl.minimum(tl.maximum(tl.load(QueryStart + (r + 1) * stride_qs).to(tl.int64), q_start), rows)
    q_start = q_start.to(tl.int32)
    q_len = q_end.to(tl.int32) - q_start
    per_split = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_KV) * BLOCK_KV
    kv_lo = split * per_split
    kv_hi = tl.minimum(kv_lo + per_split, seq_len)
    return seq_len, q_start, q_len, kv_lo, kv_hi


request_bounds = triton.jit(request_bounds_fn)
