"""The attention kernel over tq's paged cache, and the kernel that merges its kv splits.

One program owns (request, kv head, kv split). It dequantises each K/V tile once and
shares it across every row that reads it, all q heads of the GQA group times the
request's query tokens, so both products are real matrix products (``tl.dot``). Scores
are computed in the rotated domain: the query is rotated once per program. The tile step's
arithmetic (online softmax, value scales folded into the probabilities, centred value
codes) is ``online_softmax``'s, which the Gluon kernel compiles too. Splits of the
sequence are merged by log-sum-exp in a second kernel; a split that is masked for a row
contributes nothing.

Metadata values are never trusted for addressing (the launcher documents the results):
each program clamps its seq_len to ``[0, block_table capacity]`` and its query rows to
``[0, rows)``, where ``rows`` is ``query_start_loc[num_reqs]`` clamped to
``[0, num_query_rows]`` (``bounds.request_bounds``, which the Gluon kernel compiles too); a
block id outside ``[0, num_blocks)`` is read as the last block (see ``tile``). These are
scalar operations once per program, outside the loop over the sequence.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..hadamard import fwht_rows
from ..key_poly import columns_in_head_order, query_in_key_order
from ..value_words import value_columns, value_columns_in_head_order
from .bounds import balanced_chunk, request_bounds
from .online_softmax import nonfinite_rows, output_factors, row_lse, saturate
from .tile import attend_tile, load_tile, tile_block_ids


@triton.jit
def attention_kernel(
    Q,
    Cache,
    BlockTable,
    SeqLens,
    QueryStart,
    Centroids,
    Out,
    Partial,
    Lse,
    q_mul,
    q_scale,
    num_query_rows,
    last_block,
    bt_cap,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_blk,
    stride_bt,
    stride_bc,
    stride_sl,
    stride_qs,
    split_programs,
    KeyGain,
    KeyOffset,
    KeyFirstOffset,
    ValueGain,
    ValueOffset,
    ValueFirstOffset,
    VCentroids,
    G: tl.constexpr,
    G_PAD: tl.constexpr,
    NUM_Q_HEADS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
    # the cache block's description (tq_core.layout.KernelFields.constexprs())
    D: tl.constexpr,
    LOG2_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_STRIDE: tl.constexpr,
    KEY_OFF: tl.constexpr,
    KEY_BYTES: tl.constexpr,
    NORM_OFF: tl.constexpr,
    VAL_OFF: tl.constexpr,
    VAL_BYTES: tl.constexpr,
    SCALE_OFF: tl.constexpr,
    ZERO_OFF: tl.constexpr,
    KEY_FP8: tl.constexpr,
    KBITS: tl.constexpr,
    VBITS: tl.constexpr,
    NORM_CORRECTION: tl.constexpr,
    PREFETCH: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    SATURATE_QUERY: tl.constexpr,
    KEY_LUT: tl.constexpr = False,
    WIDE_LUT: tl.constexpr = True,
    BALANCE: tl.constexpr = False,
    SKIP_EMPTY: tl.constexpr = False,
    CALIBRATED: tl.constexpr = False,
    INT_VALUES: tl.constexpr = False,
    VALUE_PAIRS: tl.constexpr = False,
    KEY_POLY: tl.constexpr = False,
    VALUE_POLY: tl.constexpr = False,
    CHUNKS_T: tl.constexpr = False,
):
    """``PREFETCH``: issue each tile's loads one iteration ahead of its decoding (and its
    block ids two ahead), by hand; the loop then carries no ``num_stages`` of its own
    (``LOOP_STAGES`` is None). Otherwise a tile is loaded in the iteration that decodes it
    and Triton's pipeliner stages the loads over ``LOOP_STAGES`` stages.
    ``SATURATE_QUERY``: clamp the scaled query to ±65504 before its round-toward-zero
    fp16 cast; False where that cast saturates by itself (see ``device.DeviceFacts.cast_saturates``).
    ``KEY_LUT``, ``WIDE_LUT``, ``INT_VALUES``, ``KEY_POLY``, ``VALUE_POLY``: see ``tile.attend_tile``
    (``Centroids`` is then a register table, or ``key_poly``'s constants, and so is
    ``VCentroids`` with ``VALUE_POLY``; ``INT_VALUES``: tq_k4v4's symmetric values from their
    codes' bits, ``VCentroids`` not read).
    ``BALANCE``: the kv splits are
    sized from the batch's lengths for about ``split_programs`` programs
    (``bounds.balanced_chunk``); otherwise each request's sequence is divided evenly.
    ``SKIP_EMPTY`` (with kv splits): a split with no position for a query chunk writes only
    its rows' log-sum-exp (-inf); ``merge_kernel`` must then be launched with it too.
    ``CHUNKS_T``: 3-bit code words loaded transposed (``plan.transposed_chunks``)."""
    r = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    BLOCK_M: tl.constexpr = BLOCK_Q * G_PAD

    # the request's sequence, query rows and this split's share, clamped (bounds.py)
    chunk = 0
    if BALANCE:
        chunk = balanced_chunk(SeqLens, stride_sl, bt_cap, split_programs, NUM_SPLITS, BLOCK_KV)
    seq_len, q_start, q_len, kv_lo, kv_hi = request_bounds(
        SeqLens, QueryStart, stride_sl, stride_qs, bt_cap, num_query_rows, chunk, NUM_SPLITS, BLOCK_KV, BALANCE
    )

    m_idx = tl.arange(0, BLOCK_M)
    g = m_idx % G_PAD
    head = h * G + g
    d = tl.arange(0, D)
    head_base = Cache + h.to(tl.int64) * HEAD_STRIDE
    bt_row = BlockTable + r.to(tl.int64) * stride_bt
    if CALIBRATED:
        ch = h.to(tl.int64) * D + d  # this kv head's channels of the calibration vectors
        # the query is scaled before the rotation sums it, as below, and divided by the key gain
        q_cols = (q_mul / tl.sqrt(D * 1.0)) / tl.load(KeyGain + ch)
        key_first_shift = tl.load(KeyFirstOffset + ch) - tl.load(KeyOffset + ch)

    for qc in range(0, q_len, BLOCK_Q):
        row_tok = qc + m_idx // G_PAD
        row_ok = (row_tok < q_len) & (g < G)
        row_pos = seq_len - q_len + row_tok  # the last position each row may attend to
        q_row = (q_start + row_tok).to(tl.int64)
        # SKIP_EMPTY: a kv split that holds no position this query chunk may see (a short
        # request's surplus splits) only marks its rows empty (log-sum-exp -inf), and
        # merge_kernel skips their partial outputs, which are not written
        if SKIP_EMPTY and kv_lo >= tl.minimum(kv_hi, seq_len - q_len + tl.minimum(qc + BLOCK_Q, q_len)):
            slot = (q_row * NUM_Q_HEADS + head) * NUM_SPLITS + split
            tl.store(Lse + slot, tl.full((BLOCK_M,), float("-inf"), tl.float32), mask=row_ok)
        else:
            q = tl.load(
                Q + q_row[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :], mask=row_ok[:, None], other=0.0
            ).to(tl.float32)
            # a NaN or ±inf query element makes its row NaN, as in tq_core. The scores alone do
            # not always: -inf times keys whose element has one sign makes every score -inf,
            # and that row would come out as 0
            q_bad = nonfinite_rows(q)
            # The fp16 product sees the query times q_mul = scale * log2(e) / q_scale; the
            # scores are multiplied back by q_scale (a power of two chosen by the launcher, see
            # launch.query_scaling) where they enter the exponent. The cast rounds toward zero,
            # so finite elements beyond fp16's range saturate at ±65504 (IEEE 754 overflow
            # under that rounding); NaN and ±inf pass, so that only their own row is NaN.
            # Scaled before the rotation sums it (q_mul / sqrt(D) < 1), so that the butterflies
            # cannot overflow for a finite query (docs/overview.md, "Non-finite inputs").
            first_bias = tl.zeros((BLOCK_M,), dtype=tl.float32)
            if KEY_FP8:
                q = q * q_mul
            elif CALIBRATED:
                # in the scores' units: (q * q_mul) . (mu0 - mu), for position 0 only
                first_bias = tl.sum(q * q_mul * key_first_shift[None, :], axis=1)
                q = fwht_rows(q * q_cols[None, :], BLOCK_M, D, LOG2_D)
            else:
                q = fwht_rows(q * (q_mul / tl.sqrt(D * 1.0)), BLOCK_M, D, LOG2_D)
            if SATURATE_QUERY:
                # the same saturation by hand, where the cast is not known to saturate
                q = saturate(q)
            q16 = q.to(tl.float16, fp_downcast_rounding="rtz")
            if KEY_POLY:
                # the decoded keys' columns are in key_poly.key_columns' order
                q16 = query_in_key_order(q16, BLOCK_M, D)

            m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
            l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
            acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
            r_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
            f_i = tl.full((), 0.0, dtype=tl.float32)  # the value scales' reference (online_softmax)
            # rows of this query chunk see nothing past the chunk's last position
            hi = tl.minimum(kv_hi, seq_len - q_len + tl.minimum(qc + BLOCK_Q, q_len))
            # ... and tiles that end by full_hi are seen whole by every row (the chunk's first
            # row, at position seq_len - q_len + qc, sees the least)
            full_hi = tl.minimum(hi, seq_len - q_len + qc + 1)

            if PREFETCH:
                # the first tile's bytes and the second tile's block ids are in flight before the loop
                blk = tile_block_ids(bt_row, stride_bc, kv_lo, hi, last_block, BLOCK_KV, BLOCK_SIZE)
                tile = load_tile(
                    head_base,
                    blk,
                    kv_lo,
                    hi,
                    stride_blk,
                    BLOCK_KV=BLOCK_KV,
                    D=D,
                    BLOCK_SIZE=BLOCK_SIZE,
                    KEY_OFF=KEY_OFF,
                    KEY_BYTES=KEY_BYTES,
                    NORM_OFF=NORM_OFF,
                    VAL_OFF=VAL_OFF,
                    VAL_BYTES=VAL_BYTES,
                    SCALE_OFF=SCALE_OFF,
                    ZERO_OFF=ZERO_OFF,
                    KEY_FP8=KEY_FP8,
                    KBITS=KBITS,
                    VBITS=VBITS,
                    CALIBRATED=CALIBRATED,
                    CHUNKS_T=CHUNKS_T,
                )
                blk = tile_block_ids(bt_row, stride_bc, kv_lo + BLOCK_KV, hi, last_block, BLOCK_KV, BLOCK_SIZE)
            for start in tl.range(kv_lo, hi, BLOCK_KV, num_stages=LOOP_STAGES):
                # the mode decides which tile this iteration issues the loads of: the next one
                # (decoded while they are in flight) or this one
                if PREFETCH:
                    current = tile
                    ahead = start + BLOCK_KV
                else:
                    blk = tile_block_ids(bt_row, stride_bc, start, hi, last_block, BLOCK_KV, BLOCK_SIZE)
                    ahead = start
                tile = load_tile(
                    head_base,
                    blk,
                    ahead,
                    hi,
                    stride_blk,
                    BLOCK_KV=BLOCK_KV,
                    D=D,
                    BLOCK_SIZE=BLOCK_SIZE,
                    KEY_OFF=KEY_OFF,
                    KEY_BYTES=KEY_BYTES,
                    NORM_OFF=NORM_OFF,
                    VAL_OFF=VAL_OFF,
                    VAL_BYTES=VAL_BYTES,
                    SCALE_OFF=SCALE_OFF,
                    ZERO_OFF=ZERO_OFF,
                    KEY_FP8=KEY_FP8,
                    KBITS=KBITS,
                    VBITS=VBITS,
                    CALIBRATED=CALIBRATED,
                    CHUNKS_T=CHUNKS_T,
                )
                if PREFETCH:
                    blk = tile_block_ids(bt_row, stride_bc, start + 2 * BLOCK_KV, hi, last_block, BLOCK_KV, BLOCK_SIZE)
                else:
                    current = tile
                m_i, l_i, acc, r_i, f_i = attend_tile(
                    q16,
                    q_scale,
                    m_i,
                    l_i,
                    acc,
                    r_i,
                    f_i,
                    row_ok,
                    row_pos,
                    start,
                    hi,
                    full_hi,
                    current,
                    Centroids,
                    VCentroids,
                    first_bias,
                    BLOCK_KV=BLOCK_KV,
                    D=D,
                    KEY_FP8=KEY_FP8,
                    KBITS=KBITS,
                    VBITS=VBITS,
                    NORM_CORRECTION=NORM_CORRECTION,
                    KEY_LUT=KEY_LUT,
                    WIDE_LUT=WIDE_LUT,
                    CALIBRATED=CALIBRATED,
                    INT_VALUES=INT_VALUES,
                    VALUE_PAIRS=VALUE_PAIRS,
                    KEY_POLY=KEY_POLY,
                    VALUE_POLY=VALUE_POLY,
                )

            a, b = output_factors(l_i, r_i, f_i, q_bad)
            if CALIBRATED:
                if VALUE_POLY:
                    # the accumulator's column c holds head_dim index key_poly.key_columns(c)
                    acc = columns_in_head_order(acc, BLOCK_M, D)
                elif INT_VALUES:
                    # ... or value_words.value_columns(c) (tile.value_pairs)
                    acc = value_columns_in_head_order(acc, BLOCK_M, D)
                # b is the probability of position 0; the accumulator is rotated. A row that saw
                # no key (l = 0: a negative position) is written as 0, as for vLLM's formats,
                # so it takes no value offset
                o = fwht_rows(acc * (a / tl.sqrt(D * 1.0))[:, None], BLOCK_M, D, LOG2_D)
                nu = tl.load(ValueOffset + ch)
                nu_first_shift = tl.load(ValueFirstOffset + ch) - nu
                offset = (l_i > 0).to(tl.float32)[:, None] * nu[None, :] + b[:, None] * nu_first_shift[None, :]
                o = o / tl.load(ValueGain + ch)[None, :] + offset
            else:
                o = acc * a[:, None] + b[:, None]
            if VALUE_PAIRS and not CALIBRATED:
                # the accumulator's column c holds head_dim index value_columns(c) (tile.value_pairs)
                d_out = value_columns(d)
            else:
                d_out = d
            if NUM_SPLITS == 1:
                tl.store(
                    Out + q_row[:, None] * stride_ot + head[:, None] * stride_oh + d_out[None, :],
                    o.to(Out.dtype.element_ty),
                    mask=row_ok[:, None],
                )
            else:
                slot = (q_row * NUM_Q_HEADS + head) * NUM_SPLITS + split
                tl.store(Partial + slot[:, None] * D + d[None, :], o, mask=row_ok[:, None])
                tl.store(Lse + slot, row_lse(m_i, l_i, q_bad, SKIP_EMPTY), mask=row_ok)


# the merge kernel's warps: one warp per program keeps the sum over splits inside a warp
# (with more it crosses warps through shared memory, which measured slower on the H200)
MERGE_WARPS = 1


@triton.jit
def merge_kernel(
    Partial,
    Lse,
    Out,
    QueryStart,
    num_reqs,
    stride_qs,
    stride_ot,
    stride_oh,
    NUM_Q_HEADS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    D: tl.constexpr,
    VALUE_COLUMNS: tl.constexpr = False,
    SKIP_EMPTY: tl.constexpr = False,
):
    """Each output row from its splits' partial outputs, weighted by their log-sum-exp.
    One program per (query row, q head) of the query: a row from ``query_start_loc[num_reqs]``
    on (the attention kernel's ``rows``) is not written. Its partial outputs are read from
    the workspace all the same (rows below the grid's, so inside it), so that no load waits
    for ``query_start_loc``. ``VALUE_COLUMNS``: the partial outputs' column ``c`` holds
    head_dim index ``value_words.value_columns(c)`` (the Gluon kernel stores its
    accumulator's columns as they are, so that each thread's neighbouring columns leave in
    one vector store). ``SKIP_EMPTY``: a split whose log-sum-exp is -inf wrote no partial
    output (the attention kernels' ``SKIP_EMPTY``), so it is not read."""
    t = tl.program_id(0).to(tl.int64)
    hq = tl.program_id(1)
    total = tl.load(QueryStart + num_reqs * stride_qs).to(tl.int64)
    s = tl.arange(0, SPLITS_PAD)
    s_ok = s < NUM_SPLITS
    slot = (t * NUM_Q_HEADS + hq) * NUM_SPLITS + s
    lse = tl.load(Lse + slot, mask=s_ok, other=float("-inf"))
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp2(lse - top)
    d = tl.arange(0, D)
    live = s_ok
    if SKIP_EMPTY:
        live = s_ok & (lse != float("-inf"))
    part = tl.load(Partial + slot[:, None] * D + d[None, :], mask=live[:, None], other=0.0).to(tl.float32)
    den = tl.sum(w, axis=0)
    o = tl.sum(w[:, None] * part, axis=0) / tl.where(den > 0, den, 1.0)
    if VALUE_COLUMNS:
        dv = value_columns(d)
    else:
        dv = d
    tl.store(Out + t * stride_ot + hq * stride_oh + dv, o.to(Out.dtype.element_ty), mask=d * 0 + t < total)
