"""Triton helpers of the attention loop: load one K/V tile, then attend to it.

A tile is ``BLOCK_KV`` consecutive positions of one request and kv head. Loading and
decoding are separate so that the loop can issue a tile's loads an iteration before it
decodes it (the prefetch mode). A loaded tile is the tuple ``(kw, kn, vw, vs, vz)``: the
key's packed words (``bitpack.load_words``' tuple; for fp8 keys six references to the fp8
bytes), the fp16 key norms, the value's packed words, and the fp16 value scales (the
folded norms or ``s``, for the table values of calibrated formats) and zero points (not
read for those: zeros).

A position is read only when it lies before ``hi``; a block id outside
``[0, num_blocks)`` is read as the cache's last block (an unsigned minimum with
``num_blocks - 1``, one instruction per id where the block table is int32), so no
block-table value addresses memory outside the cache. The masks stay functions of the
position alone: a mask computed from the loaded block ids would have to be moved into the
layout of every load, which costs the decode loop about a tenth of its time on an H200.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..bitpack import fp16_halves, join4, load_words, unpack
from ..cache_fields import FP16_BYTES, field_ptr
from ..codebook_decode import codebook_tile
from ..key_poly import poly_keys
from .online_softmax import row_sum, tile_step, value_mid


@triton.jit
def tile_block_ids(bt_row, stride_bc, start, hi, last_block, BLOCK_KV: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """The physical block of the tile at ``start`` (0 from ``hi`` on), as int64 inside
    ``[0, last_block]``: an id outside (a negative one is a huge unsigned number) becomes
    ``last_block``. ``bt_row``: the request's block-table row, whose entries are
    ``stride_bc`` apart. ``start`` is a multiple of ``BLOCK_KV`` (the loop's tiles start at
    ``kv_lo``, a whole number of tiles: ``bounds.request_bounds``). Where ``BLOCK_SIZE`` is a
    multiple of ``BLOCK_KV`` the tile lies in one block: one scalar id. Where ``BLOCK_KV`` is a
    multiple of ``BLOCK_SIZE`` the tile holds whole blocks: one load per block, repeated
    over its positions. Otherwise (block sizes that are not a power of two) one load per
    position. :func:`tile_offsets` gives the positions' entries to match."""
    if BLOCK_SIZE % BLOCK_KV == 0:
        blk = tl.load(bt_row + (start // BLOCK_SIZE) * stride_bc, mask=start < hi, other=0)
    elif BLOCK_KV % BLOCK_SIZE == 0:
        # whole blocks per tile: the block of position i is the tile's first plus i // BLOCK_SIZE
        NB: tl.constexpr = BLOCK_KV // BLOCK_SIZE
        b = tl.arange(0, NB)
        ids = tl.load(bt_row + (start // BLOCK_SIZE + b) * stride_bc, mask=start + b * BLOCK_SIZE < hi, other=0)
        blk = tl.reshape(tl.broadcast_to(ids[:, None], (NB, BLOCK_SIZE)), (BLOCK_KV,))
    else:
        pos = start + tl.arange(0, BLOCK_KV)
        blk = tl.load(bt_row + (pos // BLOCK_SIZE) * stride_bc, mask=pos < hi, other=0)
    if blk.dtype == tl.int32:
        blk = tl.minimum(blk.to(tl.uint32, bitcast=True), last_block.to(tl.uint32))
    else:
        blk = tl.minimum(blk.to(tl.int64).to(tl.uint64, bitcast=True), last_block.to(tl.uint64))
    return blk.to(tl.int64)


@triton.jit
def tile_offsets(start, BLOCK_KV: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Each position's entry in its block, ``(start + i) % BLOCK_SIZE``, for the tile at
    ``start`` (a multiple of ``BLOCK_KV``, see :func:`tile_block_ids`). Where one size
    divides the other it needs no division per position: ``i % BLOCK_SIZE`` does not
    depend on the tile (the compiler keeps it out of the loop), and inside one block the
    entries are ``start % BLOCK_SIZE + i``."""
    i = tl.arange(0, BLOCK_KV)
    if BLOCK_SIZE % BLOCK_KV == 0:
        return start % BLOCK_SIZE + i
    elif BLOCK_KV % BLOCK_SIZE == 0:
        return i % BLOCK_SIZE
    else:
        return (start + i) % BLOCK_SIZE


@triton.jit
def load_tile(
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
    CALIBRATED: tl.constexpr = False,
    CHUNKS_T: tl.constexpr = False,
):
    """Issue the loads of the tile at ``start`` (raw packed words; decoding happens in
    :func:`attend_tile`). ``head_base``: the cache plus this kv head's offset; ``blk``: the
    tile's block ids, inside the cache (:func:`tile_block_ids`: one scalar, or one per
    position); ``start``: a multiple of ``BLOCK_KV``; ``CHUNKS_T``: 3-bit code
    words loaded transposed (``bitpack.load_words``' ``TRANSPOSED``)."""
    pos = start + tl.arange(0, BLOCK_KV)
    ok = pos < hi
    base = head_base + blk * stride_blk  # one scalar where the tile lies in one block
    off = tile_offsets(start, BLOCK_KV, BLOCK_SIZE)
    if KEY_FP8:
        d = tl.arange(0, D)
        k8 = tl.load(field_ptr(base, off, KEY_OFF, KEY_BYTES)[:, None] + d[None, :], mask=ok[:, None], other=0)
        kw = (k8, k8, k8, k8, k8, k8)
        kn = tl.zeros((BLOCK_KV,), dtype=tl.float16)
    else:
        kw = load_words(field_ptr(base, off, KEY_OFF, KEY_BYTES).to(tl.pointer_type(tl.int32)), ok, KBITS, D, CHUNKS_T)
        kn = tl.load(field_ptr(base, off, NORM_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16)), mask=ok, other=0.0)
    vw = load_words(field_ptr(base, off, VAL_OFF, VAL_BYTES).to(tl.pointer_type(tl.int32)), ok, VBITS, D, CHUNKS_T)
    vs = tl.load(field_ptr(base, off, SCALE_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16)), mask=ok, other=0.0)
    if CALIBRATED:
        vz = tl.zeros((BLOCK_KV,), dtype=tl.float16)
    else:
        vz = tl.load(field_ptr(base, off, ZERO_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16)), mask=ok, other=0.0)
    return kw, kn, vw, vs, vz


@triton.jit
def _nibble_pairs(w, J: tl.constexpr, SYMMETRIC: tl.constexpr):
    """Nibbles ``J`` and ``J + 4`` of ``w`` as the halves of an fp16 pair: ``0x6400 | code``
    (the number ``1024 + code``), or with ``SYMMETRIC`` ``0x6000 | (code << 1)`` (the number
    ``512 + code``: fp16's step is 1/2 there)."""
    if SYMMETRIC:
        if J == 0:
            x = (w << 1) & 0x001E001E
        else:
            x = (w >> (4 * J - 1)) & 0x001E001E
        return x | 0x60006000
    else:
        return ((w >> (4 * J)) & 0x000F000F) | 0x64006400


@triton.jit
def value_pairs(w, T: tl.constexpr, D: tl.constexpr, SYMMETRIC: tl.constexpr = False):
    """4-bit value codes ``[T, D]`` as fp16, two per 32-bit operation, in
    ``value_words.value_columns``' column order: nibbles ``J`` and ``J + 4`` of each word
    (16 bits apart) become one fp16 pair (:func:`_nibble_pairs`), centred by one exact
    subtraction: uniform codes to ``code - 8``, ``SYMMETRIC`` ones (tq_k4v4's values) to
    ``code - 7.5``."""
    x0 = _nibble_pairs(w, 0, SYMMETRIC)
    x1 = _nibble_pairs(w, 1, SYMMETRIC)
    x2 = _nibble_pairs(w, 2, SYMMETRIC)
    x3 = _nibble_pairs(w, 3, SYMMETRIC)
    # word J of each group of four, then each word's halves, low first: column 8 w + 2 J + h
    x = join4(x0, x1, x2, x3).reshape(T, D // 2)
    if SYMMETRIC:
        return fp16_halves(x).reshape(T, D) - 519.5
    else:
        return fp16_halves(x).reshape(T, D) - 1032.0


@triton.jit
def attend_tile(
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
    tile,
    Centroids,
    VCentroids,
    first_bias,
    BLOCK_KV: tl.constexpr,
    D: tl.constexpr,
    KEY_FP8: tl.constexpr,
    KBITS: tl.constexpr,
    VBITS: tl.constexpr,
    NORM_CORRECTION: tl.constexpr,
    KEY_LUT: tl.constexpr = False,
    WIDE_LUT: tl.constexpr = True,
    CALIBRATED: tl.constexpr = False,
    INT_VALUES: tl.constexpr = False,
    VALUE_PAIRS: tl.constexpr = False,
    KEY_POLY: tl.constexpr = False,
    VALUE_POLY: tl.constexpr = False,
):
    """Decode one loaded tile (:func:`load_tile`'s tuple) and fold it into the online
    softmax state ``(m_i, l_i, acc, r_i, f_i)``, which it returns updated, by
    ``online_softmax.tile_step`` (the rule both kernels share). The query is
    ``q16 * q_scale`` (a scalar power of two, a kernel argument). A row sees the positions
    below ``hi`` up to its own (``row_pos``); every row sees all positions below ``full_hi``.
    ``KEY_LUT`` (3- and
    4-bit codebook keys: ``plan.table_keys``): the centroids are looked up in a register
    table in Triton integer operations (``Centroids`` is then ``key_lut.lut_words``' table;
    4-bit ones through its 64-bit form with ``WIDE_LUT``, ``plan.wide_key_tables``);
    otherwise they are gathered from ``Centroids`` (the fp16 codebook), as the calibrated
    formats' codebook values are from ``VCentroids`` without ``VALUE_POLY``.
    ``KEY_POLY`` / ``VALUE_POLY`` (``plan.poly_keys`` / ``plan.poly_values``): 3-bit codes
    decoded by ``key_poly``'s polynomial (``Centroids`` / ``VCentroids`` its constants), the
    tile's columns in ``key_poly.key_columns``' order: the query comes permuted to match, and
    the accumulator leaves in that order.

    ``CALIBRATED`` (tq's calibrated formats, docs/format.md): ``first_bias`` ``[M]`` is added
    to each row's score of position 0 (the query's product with ``mu0 - mu``), the values
    are Lloyd-Max vectors decoded from ``VCentroids`` (the fp16 codebook of ``VBITS``
    bits) in the rotated domain, with their scales (stored norm-corrected,
    ``Preset.folds_norm``) folded into the probabilities, and ``r`` sums the probability
    of position 0 instead of value offsets. ``INT_VALUES`` (tq_k4v4's symmetric 4-bit
    values, ``plan.kernel_constexprs``): each code decodes to ``code - 7.5`` from its bits,
    two per operation as uniform values do (:func:`value_pairs`: the accumulator's columns
    leave in ``value_words.value_columns``' order), and its scale is multiplied by 1/8 (the
    table's ``(2 code - 15) / 16``); ``VCentroids`` is not read. Otherwise ``VCentroids`` and
    ``first_bias`` are not read."""
    ckw, ckn, cvw, cvs, cvz = tile
    pos = start + tl.arange(0, BLOCK_KV)
    if KEY_FP8:
        k16 = ckw[0].to(tl.float8e4nv, bitcast=True).to(tl.float16)
        s = tl.dot(q16, tl.trans(k16))
    else:
        if KEY_POLY:
            # 3-bit keys by key_poly's polynomial (Centroids: its constants), in
            # key_poly.key_columns' order, as the query is
            k16, cn2 = poly_keys(ckw[0], ckw[1], ckw[2], Centroids, BLOCK_KV, D)
        else:
            k16, cn2 = codebook_tile(ckw, Centroids, KBITS, BLOCK_KV, D, KEY_LUT, WIDE_LUT)
        if not KEY_POLY and q16.shape[0] >= 64:
            # no-op for the result (masked tokens' scores are discarded below); it pins the
            # tile's layout. Without it Triton 3.6 moves the dot operand's shared-memory
            # conversion up into a gathered tile's decode and fails to compile tiles of 64
            # query rows (Illegal shared layout), and the 4-bit formats compile but ran 1-12%
            # slower on an H100; the polynomial's keys ran up to 5% faster without it
            # (docs/perf/runs/2026-12-07-layout-pins). A select per element, so only there.
            k16 = tl.where((pos < hi)[:, None], k16, 0.0)
        s = tl.dot(q16, tl.trans(k16))
        knorm = ckn.to(tl.float32)
        if NORM_CORRECTION:
            knorm = tl.where(cn2 > 0, knorm * tl.math.rsqrt(cn2), 0.0)
        s = s * knorm[None, :]
        if CALIBRATED:
            s = s + tl.where(pos[None, :] == 0, first_bias[:, None], 0.0)

    if q16.shape[0] < 64 or start + BLOCK_KV > full_hi:
        # tiles of 64 rows or more mask only where the tile reaches past ``hi`` or past some
        # row's last position: every row of the tiles before ``full_hi`` sees all of their
        # positions (padding rows, whose outputs are not written, see finite scores of their
        # zero queries there). The mask is a select per score, a large share of such a
        # loop's instructions (timed in docs/perf/runs/2026-12-07-portable-h100-tiles).
        # Smaller tiles always mask
        visible = row_ok[:, None] & (pos[None, :] < hi) & (pos[None, :] <= row_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
    if CALIBRATED and INT_VALUES:
        # symmetric values (tq_k4v4): the table's (2 code - 15) / 16 is (code - 7.5) / 8, the
        # 1/8 in the scale; two codes per operation, the columns in value_words.value_columns'
        # order, and so the accumulator's
        tl.static_assert(VBITS == 4, "symmetric values are 4-bit codes")
        v16 = value_pairs(cvw[0], BLOCK_KV, D, SYMMETRIC=True)
        vscale = cvs.to(tl.float32) * 0.125
    elif CALIBRATED:
        if VALUE_POLY:
            # tq_k4v3's 3-bit values by key_poly's polynomial (VCentroids: its constants), in
            # key_poly.key_columns' order: so are the accumulator's columns
            v16, vcn2 = poly_keys(cvw[0], cvw[1], cvw[2], VCentroids, BLOCK_KV, D)
        else:
            v16, vcn2 = codebook_tile(cvw, VCentroids, VBITS, BLOCK_KV, D, False)
        if q16.shape[0] >= 64:
            # pins the value tile's layout, as for the keys above (Triton 3.6, 64 query rows)
            v16 = tl.where((pos < hi)[:, None], v16, 0.0)
        vscale = cvs.to(tl.float32)
        if NORM_CORRECTION:
            # the norm-corrected scale of each coded value (a zero vector has scale 0)
            vscale = tl.where(vcn2 > 0, vscale * tl.math.rsqrt(vcn2), 0.0)
    else:
        vscale = cvs.to(tl.float32)
    m_i, l_i, f_i, w, factor, p, alpha = tile_step(s, q_scale, m_i, l_i, f_i, vscale)
    if CALIBRATED:
        acc = tl.dot(w, v16, acc * factor[:, None])
        r_i = row_sum(r_i, alpha, p, (pos == 0).to(tl.float32))
    else:
        if VBITS == 4 and VALUE_PAIRS:
            v16 = value_pairs(cvw[0], BLOCK_KV, D)
        else:
            # fp16 code - 2^(VBITS-1), exact: 0x6400 | code is the fp16 number 1024 + code
            vc = unpack(cvw, VBITS, BLOCK_KV, D)
            v16 = (vc | 0x6400).to(tl.uint16).to(tl.float16, bitcast=True) - (1024.0 + (1 << (VBITS - 1)))
        acc = tl.dot(w, v16, acc * factor[:, None])
        r_i = row_sum(r_i, alpha, p, value_mid(cvz, vscale, VBITS))
    return m_i, l_i, acc, r_i, f_i
