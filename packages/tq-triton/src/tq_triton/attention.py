"""Attention over tq's paged compressed cache: decode and speculative verification.

One program owns (request, kv head, kv split). It dequantises each K/V tile once and
shares it across every row that reads it, all q heads of the GQA group times the
request's query tokens, so both products are real matrix products (``tl.dot``). Scores
are computed in the rotated domain: the query is rotated once per program. Value
scales are folded into the probabilities and zero points into a row sum, so the value
tile is the raw codes. Splits of the sequence are merged by log-sum-exp in a second
kernel; a split that is masked for a row contributes nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tq_core import Preset
from tq_core.checks import check_attention_args, debug_enabled

from ._bits import load_words, unpack
from ._decode import codebook_keys
from ._rotation import fwht_rows
from .constants import codebook, dummy, layout_constexprs
from .device import check_runnable, multiprocessor_count
from .tuning import AttentionConfig, attention_config, launch_options, register_cap
from .workspace import buffer

LOG2E = 1.4426950408889634
MAX_BLOCK_M = 128


@triton.jit
def _tile_block_ids(bt_row, start, hi, BLOCK_KV: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    pos = start + tl.arange(0, BLOCK_KV)
    return tl.load(bt_row + pos // BLOCK_SIZE, mask=pos < hi, other=0).to(tl.int64)


@triton.jit
def _load_tile(
    head_base,
    blk,
    start,
    hi,
    stride_blk,
    BLOCK_KV: tl.constexpr,
    D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
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
):
    """Issue the loads of one K/V tile (raw packed words; decoding happens later)."""
    pos = start + tl.arange(0, BLOCK_KV)
    ok = pos < hi
    base = head_base + blk * stride_blk
    off = (pos % BLOCK_SIZE).to(tl.int64)
    if KEY_FP8:
        d = tl.arange(0, D)
        k0 = tl.load(base[:, None] + KEY_OFF + off[:, None] * KEY_BYTES + d[None, :], mask=ok[:, None], other=0)
        k1 = k0
        k2 = k0
        kn = tl.zeros((BLOCK_KV,), dtype=tl.float16)
    else:
        k0, k1, k2 = load_words((base + KEY_OFF + off * KEY_BYTES).to(tl.pointer_type(tl.int32)), ok, KBITS, D)
        kn = tl.load((base + NORM_OFF + off * 2).to(tl.pointer_type(tl.float16)), mask=ok, other=0.0)
    v0, v1, v2 = load_words((base + VAL_OFF + off * VAL_BYTES).to(tl.pointer_type(tl.int32)), ok, VBITS, D)
    vs = tl.load((base + SCALE_OFF + off * 2).to(tl.pointer_type(tl.float16)), mask=ok, other=0.0)
    vz = tl.load((base + ZERO_OFF + off * 2).to(tl.pointer_type(tl.float16)), mask=ok, other=0.0)
    return k0, k1, k2, kn, v0, v1, v2, vs, vz


@triton.jit
def _attend_tile(
    q16,
    m_i,
    l_i,
    acc,
    r_i,
    f_i,
    row_ok,
    row_pos,
    start,
    hi,
    ck0,
    ck1,
    ck2,
    ckn,
    cv0,
    cv1,
    cv2,
    cvs,
    cvz,
    Centroids,
    BLOCK_KV: tl.constexpr,
    D: tl.constexpr,
    KEY_FP8: tl.constexpr,
    KBITS: tl.constexpr,
    VBITS: tl.constexpr,
    NORM_CORRECTION: tl.constexpr,
    VALUE_ACC: tl.constexpr,
):
    """Decode one loaded K/V tile and fold it into the online softmax state."""
    pos = start + tl.arange(0, BLOCK_KV)
    if KEY_FP8:
        k16 = ck0.to(tl.float8e4nv, bitcast=True).to(tl.float16)
        s = tl.dot(q16, tl.trans(k16))
    else:
        k16, cn2 = codebook_keys(ck0, ck1, ck2, Centroids, KBITS, BLOCK_KV, D)
        if q16.shape[0] >= 64:
            # no-op for the result (masked tokens' scores are discarded below); it pins the
            # tile's layout: without it Triton 3.6 moves the dot operand's shared-memory
            # conversion up into the join tree and fails to compile tiles of 64 query rows
            # (Illegal shared layout). It costs a select per element, so only there.
            k16 = tl.where((pos < hi)[:, None], k16, 0.0)
        s = tl.dot(q16, tl.trans(k16))
        knorm = ckn.to(tl.float32)
        if NORM_CORRECTION:
            knorm = tl.where(cn2 > 0, knorm * tl.math.rsqrt(cn2), 0.0)
        s = s * knorm[None, :]

    visible = row_ok[:, None] & (pos[None, :] < hi) & (pos[None, :] <= row_pos[:, None])
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    # a row that has seen nothing yet keeps m = -inf; shift by 0 to avoid inf - inf
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)

    # value codes become the fp16 numbers 1 + code / 2^VBITS by setting bits only, and the
    # scales are folded into the probabilities (normalised by the tile's largest scale;
    # f = smax 2^VBITS): sum_t p_t (zero_t + code_t scale_t) then follows from one matrix
    # product. The output is kept as f_i * acc + r_i.
    vc = unpack(cv0, cv1, cv2, VBITS, BLOCK_KV, D)
    v16 = ((vc << (10 - VBITS)) | 0x3C00).to(tl.uint16).to(tl.float16, bitcast=True)
    if VALUE_ACC:
        v16 = v16 - 1.5  # centred: code / 2^VBITS - 1/2, exact (see below)
    vscale = cvs.to(tl.float32)
    smax = tl.max(vscale, axis=0)
    smax = tl.where(smax > 0, smax, 1.0)
    pw = (p * (vscale / smax)[None, :]).to(tl.float16)
    f = smax * (1 << VBITS)
    if VALUE_ACC:
        # The matrix unit accumulates into acc, rescaled by one factor per row: no other pass
        # over the [M, D] tile. With codes centred (code / 2^VBITS - 1/2, an exact subtraction)
        # the sum is f dot(pw, v16) + sum_t p_t (zero_t + scale_t 2^(VBITS-1)). Centring
        # matters: the matrix unit truncates as it accumulates, so acc must not carry an
        # offset that r_i cancels only at the end (uncentred, a 32k-token sequence on one
        # split failed test_attention's 1e-2 relative-error limit on an H200).
        acc = tl.dot(pw, v16, acc * (alpha * (f_i / f))[:, None])
        mid = cvz.to(tl.float32) + vscale * (1 << (VBITS - 1))
        r_i = r_i * alpha + tl.sum(p * mid[None, :], axis=1)
    else:
        # each tile's product is corrected, scaled and added in its own passes; f_i stays 1 and
        # r_i 0. Fewer live registers: faster for one-warp 3-bit-key decode on an H200
        pv = tl.dot(pw, v16) - tl.sum(pw.to(tl.float32), axis=1)[:, None]
        zsum = tl.sum(p * cvz.to(tl.float32)[None, :], axis=1)
        acc = acc * alpha[:, None] + pv * f + zsum[:, None]
        f = f_i
    return m_new, l_i, acc, r_i, f


@triton.jit
def _attention_kernel(
    Q,
    Cache,
    BlockTable,
    SeqLens,
    QueryStart,
    Centroids,
    Out,
    Partial,
    Lse,
    sm_scale,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_blk,
    stride_bt,
    G: tl.constexpr,
    G_PAD: tl.constexpr,
    NUM_Q_HEADS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
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
    NUM_STAGES: tl.constexpr,
    VALUE_ACC: tl.constexpr,
):
    r = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    BLOCK_M: tl.constexpr = BLOCK_Q * G_PAD

    seq_len = tl.load(SeqLens + r).to(tl.int32)
    q_start = tl.load(QueryStart + r).to(tl.int32)
    q_len = tl.load(QueryStart + r + 1).to(tl.int32) - q_start

    # this split's share of the sequence, in whole tiles
    per_split = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_KV) * BLOCK_KV
    kv_lo = split * per_split
    kv_hi = tl.minimum(kv_lo + per_split, seq_len)

    m_idx = tl.arange(0, BLOCK_M)
    g = m_idx % G_PAD
    head = h * G + g
    d = tl.arange(0, D)
    head_base = Cache + h.to(tl.int64) * HEAD_STRIDE
    bt_row = BlockTable + r.to(tl.int64) * stride_bt

    for qc in range(0, q_len, BLOCK_Q):
        row_tok = qc + m_idx // G_PAD
        row_ok = (row_tok < q_len) & (g < G)
        row_pos = seq_len - q_len + row_tok  # the last position each row may attend to
        q_row = (q_start + row_tok).to(tl.int64)
        q = tl.load(
            Q + q_row[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :], mask=row_ok[:, None], other=0.0
        ).to(tl.float32)
        if KEY_FP8:
            q = q * sm_scale
        else:
            q = fwht_rows(q, BLOCK_M, D, LOG2_D) * (sm_scale / tl.sqrt(D * 1.0))
        q16 = q.to(tl.float16)

        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
        r_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        f_i = tl.full((), 1.0, dtype=tl.float32)
        # rows of this query chunk see nothing past the chunk's last position
        hi = tl.minimum(kv_hi, seq_len - q_len + tl.minimum(qc + BLOCK_Q, q_len))

        if PREFETCH:
            # software pipeline by hand: tile i is decoded while tile i+1's bytes and tile i+2's
            # block ids are in flight
            blk = _tile_block_ids(bt_row, kv_lo, hi, BLOCK_KV, BLOCK_SIZE)
            k0, k1, k2, kn, v0, v1, v2, vs, vz = _load_tile(
                head_base,
                blk,
                kv_lo,
                hi,
                stride_blk,
                BLOCK_KV,
                D,
                BLOCK_SIZE,
                KEY_OFF,
                KEY_BYTES,
                NORM_OFF,
                VAL_OFF,
                VAL_BYTES,
                SCALE_OFF,
                ZERO_OFF,
                KEY_FP8,
                KBITS,
                VBITS,
            )
            blk = _tile_block_ids(bt_row, kv_lo + BLOCK_KV, hi, BLOCK_KV, BLOCK_SIZE)
            for start in range(kv_lo, hi, BLOCK_KV):
                ck0, ck1, ck2, ckn, cv0, cv1, cv2, cvs, cvz = k0, k1, k2, kn, v0, v1, v2, vs, vz
                k0, k1, k2, kn, v0, v1, v2, vs, vz = _load_tile(
                    head_base,
                    blk,
                    start + BLOCK_KV,
                    hi,
                    stride_blk,
                    BLOCK_KV,
                    D,
                    BLOCK_SIZE,
                    KEY_OFF,
                    KEY_BYTES,
                    NORM_OFF,
                    VAL_OFF,
                    VAL_BYTES,
                    SCALE_OFF,
                    ZERO_OFF,
                    KEY_FP8,
                    KBITS,
                    VBITS,
                )
                blk = _tile_block_ids(bt_row, start + 2 * BLOCK_KV, hi, BLOCK_KV, BLOCK_SIZE)
                m_i, l_i, acc, r_i, f_i = _attend_tile(
                    q16,
                    m_i,
                    l_i,
                    acc,
                    r_i,
                    f_i,
                    row_ok,
                    row_pos,
                    start,
                    hi,
                    ck0,
                    ck1,
                    ck2,
                    ckn,
                    cv0,
                    cv1,
                    cv2,
                    cvs,
                    cvz,
                    Centroids,
                    BLOCK_KV,
                    D,
                    KEY_FP8,
                    KBITS,
                    VBITS,
                    NORM_CORRECTION,
                    VALUE_ACC,
                )
        else:
            # plain loads; Triton's pipeliner stages them through shared memory
            for start in tl.range(kv_lo, hi, BLOCK_KV, num_stages=NUM_STAGES):
                blk = _tile_block_ids(bt_row, start, hi, BLOCK_KV, BLOCK_SIZE)
                ck0, ck1, ck2, ckn, cv0, cv1, cv2, cvs, cvz = _load_tile(
                    head_base,
                    blk,
                    start,
                    hi,
                    stride_blk,
                    BLOCK_KV,
                    D,
                    BLOCK_SIZE,
                    KEY_OFF,
                    KEY_BYTES,
                    NORM_OFF,
                    VAL_OFF,
                    VAL_BYTES,
                    SCALE_OFF,
                    ZERO_OFF,
                    KEY_FP8,
                    KBITS,
                    VBITS,
                )
                m_i, l_i, acc, r_i, f_i = _attend_tile(
                    q16,
                    m_i,
                    l_i,
                    acc,
                    r_i,
                    f_i,
                    row_ok,
                    row_pos,
                    start,
                    hi,
                    ck0,
                    ck1,
                    ck2,
                    ckn,
                    cv0,
                    cv1,
                    cv2,
                    cvs,
                    cvz,
                    Centroids,
                    BLOCK_KV,
                    D,
                    KEY_FP8,
                    KBITS,
                    VBITS,
                    NORM_CORRECTION,
                    VALUE_ACC,
                )

        o = (acc * f_i + r_i[:, None]) / tl.where(l_i > 0, l_i, 1.0)[:, None]
        if NUM_SPLITS == 1:
            tl.store(
                Out + q_row[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
                o.to(Out.dtype.element_ty),
                mask=row_ok[:, None],
            )
        else:
            lse = tl.where(l_i > 0, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
            slot = (q_row * NUM_Q_HEADS + head) * NUM_SPLITS + split
            tl.store(Partial + slot[:, None] * D + d[None, :], o, mask=row_ok[:, None])
            tl.store(Lse + slot, lse, mask=row_ok)


@triton.jit
def _merge_kernel(
    Partial,
    Lse,
    Out,
    QueryStart,
    num_reqs,
    stride_ot,
    stride_oh,
    NUM_Q_HEADS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    D: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    hq = tl.program_id(1)
    total = tl.load(QueryStart + num_reqs).to(tl.int64)
    s = tl.arange(0, SPLITS_PAD)
    s_ok = (s < NUM_SPLITS) & (s * 0 + t < total)
    slot = (t * NUM_Q_HEADS + hq) * NUM_SPLITS + s
    lse = tl.load(Lse + slot, mask=s_ok, other=float("-inf"))
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp2(lse - top)
    d = tl.arange(0, D)
    part = tl.load(Partial + slot[:, None] * D + d[None, :], mask=s_ok[:, None], other=0.0)
    den = tl.sum(w, axis=0)
    o = tl.sum(w[:, None] * part, axis=0) / tl.where(den > 0, den, 1.0)
    tl.store(Out + t * stride_ot + hq * stride_oh + d, o.to(Out.dtype.element_ty), mask=d * 0 + t < total)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def longest_query(num_query_tokens: int, num_reqs: int, max_query_len: int | None) -> int:
    """The caller's ``max_query_len`` hint or, without one, the longest q_len possible when every
    request has >= 1 token. A request longer than the hint is still correct (the kernel loops
    over chunks), only slower."""
    return max_query_len if max_query_len is not None else num_query_tokens - num_reqs + 1


def plan_block_q(group_pad: int, max_query_len: int) -> int:
    """Query tokens per program chunk for a batch whose longest request has ``max_query_len``."""
    q = _next_pow2(max(1, min(max_query_len, 16)))
    q = max(q, 16 // group_pad if group_pad < 16 else 1)  # tl.dot needs >= 16 rows
    return max(1, min(q, MAX_BLOCK_M // group_pad))


def plan_splits(cfg: AttentionConfig, device: torch.device, num_reqs: int, num_kv_heads: int) -> int:
    if cfg.kv_splits:
        return cfg.kv_splits
    want = triton.cdiv(cfg.waves * multiprocessor_count(device), max(1, num_reqs * num_kv_heads))
    return max(1, min(cfg.max_kv_splits, want))


def attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    preset: str | Preset,
    scale: float,
    out: torch.Tensor | None = None,
    *,
    max_query_len: int | None = None,
    num_kv_splits: int | None = None,
    config: AttentionConfig | None = None,
) -> torch.Tensor:
    """Causal attention of each request's newest query tokens over its paged compressed cache.

    Same contract as ``tq_core.attention``. ``max_query_len`` (the longest q_len in the
    batch, known to vLLM on the host) picks the tile shape; it is a hint, any q_len is
    computed correctly. ``num_kv_splits`` / ``config`` override the tuning table for this
    call (``tq sweep`` uses them).
    """
    args = check_attention_args(
        query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale, out, check_values=debug_enabled()
    )
    check_runnable(query.device)
    if out is None:
        out = torch.empty_like(query)
    nq, hq, d = query.shape
    if args.num_reqs == 0 or nq == 0:
        return out
    if query.stride(2) != 1:
        query = query.contiguous()
    p, lay = args.preset, args.layout
    hk = args.num_kv_heads
    group = hq // hk
    g_pad = _next_pow2(group)
    if g_pad > MAX_BLOCK_M:
        raise ValueError(f"query: {group} q heads per kv head is more than tq_triton supports ({MAX_BLOCK_M})")
    longest = longest_query(nq, args.num_reqs, max_query_len)
    block_q = plan_block_q(g_pad, longest)
    # tables are keyed by the query length (decode, verify), not by the padded tile rows
    cfg = config or attention_config(query.device, p.name, longest)
    splits = num_kv_splits or plan_splits(cfg, query.device, args.num_reqs, hk)
    dev = query.device
    cent = dummy(dev) if p.key_is_fp8 else codebook(p, d, dev)[2]
    if splits > 1:
        partial = buffer(dev, "partial", nq * hq * splits * d)
        lse = buffer(dev, "lse", nq * hq * splits)
    else:
        partial = lse = dummy(dev)
    _attention_kernel[(args.num_reqs, hk, splits)](
        query,
        kv_cache,
        block_table,
        seq_lens,
        query_start_loc,
        cent,
        out,
        partial,
        lse,
        float(scale) * LOG2E,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        kv_cache.stride(0),
        block_table.stride(0),
        G=group,
        G_PAD=g_pad,
        NUM_Q_HEADS=hq,
        NUM_SPLITS=splits,
        BLOCK_Q=block_q,
        BLOCK_KV=cfg.block_kv,
        **layout_constexprs(p, lay),
        NORM_CORRECTION=p.norm_correction,
        PREFETCH=cfg.prefetch,
        NUM_STAGES=cfg.num_stages,
        VALUE_ACC=cfg.value_acc,
        num_warps=cfg.num_warps,
        **launch_options(dev),
        **register_cap(dev, cfg.max_registers),
    )
    if splits > 1:
        _merge_kernel[(nq, hq)](
            partial,
            lse,
            out,
            query_start_loc,
            args.num_reqs,
            out.stride(0),
            out.stride(1),
            NUM_Q_HEADS=hq,
            NUM_SPLITS=splits,
            SPLITS_PAD=_next_pow2(splits),
            D=d,
            num_warps=4,
        )
    return out
