"""The attention kernel with explicit layouts (Gluon), for NVIDIA GPUs.

Same arguments, results and memory rules as ``attention.kernel.attention_kernel``, for vLLM's presets:
fp8, 3- or 4-bit codebook keys with uniform 4-bit values (k8v4, k3v4_nc, 4bit_nc), and 3-bit
codebook keys with uniform 3-bit values (3bit_nc); and for tq's calibrated formats with 4-bit
keys and 3-bit Lloyd-Max or 4-bit symmetric values (tq_k4v3, tq_k4v4; not tq_k6v5). What it
states that Triton chooses for the portable kernel:

- one warp per 16 query rows (``mma.sync`` m16n8k16, warps along the rows), so the online
  softmax's row reductions stay inside a warp;
- addresses per cache block, not per token: a tile is ``BLOCK_KV // TPB`` groups of
  ``TPB`` consecutive positions that share a block, and each field of a block is
  contiguous, so each group costs one block id and one base pointer per field;
- each key/value tile is decoded once per program, every warp decoding its share of the
  tokens, into shared buffers with 16-byte rows; each warp then reads the whole tile as
  its B operand fragments. fp8 keys are converted four per two ``cvt``; 3- and 4-bit keys
  are looked up in ``key_lut``'s register table (4-bit keys: the symmetric codebook's
  magnitudes, the sign from each code's bit 3; the query is rotated in the kernel); value
  codes are decoded two per 32-bit operation (``value_words``' column order, undone where
  the output is stored; 3-bit codes are first moved to the nibbles of 4-bit words, so they
  leave the same order); calibrated formats' values (Lloyd-Max or symmetric) are looked up
  as the keys are, in the value table's registers, and each output row is rotated back
  before it is stored;
- the causal and length masks only on the tiles that need them;
- the probabilities pass from the score product's accumulator to the value product's A
  operand in registers;
- each tile's loads are issued one iteration ahead, into registers;
- with ``WGMMA`` (``AttentionConfig.wgmma``, 64-row tiles on sm_90) both products are
  Hopper's warpgroup instructions, which read the query, key and value tiles from shared
  memory once per tile for all four warps, where ``mma.sync`` has each warp read them as
  its own fragments (the H200 table's poc entries: 64-row tiles).

Gluon kernels do not run under Triton's interpreter: ``tests/test_gluon_kernel.py``
compiles this one for sm_90 on any machine and tests it against tq-core on a GPU. It is
launched where ``AttentionConfig.gluon`` is 1, or 2 where the token-rows kernel does not
apply (the H200 table's entries, or ``TQ_GLUON``), on cuda, for the launches
``attention.plan.gluon_refusal`` does not refuse.

The tile step's arithmetic is ``attention.online_softmax``'s, compiled here as Gluon: the
portable kernel computes the same numbers.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from ..attention.bounds import balanced_chunk_fn, request_bounds_fn
from ..attention.online_softmax import (
    nonfinite_rows_fn,
    output_factors_fn,
    row_lse_fn,
    row_sum_fn,
    saturate_fn,
    tile_step_fn,
    value_mid_fn,
)
from ..key_lut import magnitude_selectors_fn, selectors_fn
from ..value_words import value_columns_fn
from .lut_ptx import LUT16_PAIRS_PTX, LUT_PAIRS_PTX
from .token_rows_ptx import SYMMETRIC_PAIRS_PTX

# Triton 3.6 calls the CTA-wide barrier thread_barrier; later versions call it barrier
_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


@gluon.jit
def _halves(x):
    """The two 16-bit halves of each uint32 (low first) as a new last axis of uint16."""
    return gl.join((x & 0xFFFF).to(gl.uint16), (x >> 16).to(gl.uint16))


@gluon.jit
def _fp8_words_to_fp16(w):
    """fp8 e4m3 keys packed four per int32 word ``[..., n]`` to fp16 ``[..., n, 2, 2]`` (byte
    ``2 a + b`` of a word at ``[a, b]``): two ``cvt.rn.f16x2.e4m3x2`` per word (sm_89 and
    later), on the word's halves, with no byte shuffling."""
    lo, hi = gl.inline_asm_elementwise(
        "{ .reg .b16 l, h; mov.b32 {l, h}, $2; cvt.rn.f16x2.e4m3x2 $0, l; cvt.rn.f16x2.e4m3x2 $1, h; }",
        "=r,=r,r",
        [w],
        dtype=(gl.uint32, gl.uint32),
        is_pure=True,
        pack=1,
    )
    return _halves(gl.join(lo, hi)).to(gl.float16, bitcast=True)


@gluon.jit
def _value_words_to_fp16(w):
    """4-bit value codes packed eight per int32 word ``[..., n]`` to fp16 ``1024 + code``
    ``[..., n, 2, 2, 2]``: nibbles ``J`` and ``J + 4`` sit 16 bits apart, so one ``lop3``
    (``(x & 0x000F000F) | 0x64006400``) after a shift makes both halves of an fp16 pair.
    Element ``[a, b, h]`` is nibble ``2 a + b + 4 h`` (``value_words.value_columns``' order)."""
    p0, p1, p2, p3 = gl.inline_asm_elementwise(
        "{ .reg .b32 t; lop3.b32 $0, $4, 0x000F000F, 0x64006400, 0xEA; "
        "shr.b32 t, $4, 4; lop3.b32 $1, t, 0x000F000F, 0x64006400, 0xEA; "
        "shr.b32 t, $4, 8; lop3.b32 $2, t, 0x000F000F, 0x64006400, 0xEA; "
        "shr.b32 t, $4, 12; lop3.b32 $3, t, 0x000F000F, 0x64006400, 0xEA; }",
        "=r,=r,=r,=r,r",
        [w],
        dtype=(gl.uint32, gl.uint32, gl.uint32, gl.uint32),
        is_pure=True,
        pack=1,
    )
    return _halves(gl.join(gl.join(p0, p2), gl.join(p1, p3))).to(gl.float16, bitcast=True)


# the metadata clamps and the tile step's arithmetic that kernel.attention_kernel compiles
# as Triton, compiled as Gluon
_request_bounds = gluon.jit(request_bounds_fn)
_tile_step = gluon.jit(tile_step_fn)
_row_sum = gluon.jit(row_sum_fn)
_value_mid = gluon.jit(value_mid_fn)
_output_factors = gluon.jit(output_factors_fn)
_row_lse = gluon.jit(row_lse_fn)
_nonfinite_rows = gluon.jit(nonfinite_rows_fn)
_saturate = gluon.jit(saturate_fn)
_balanced_chunk_of = gluon.jit(balanced_chunk_fn)


@gluon.jit
def _balanced_chunk(
    SeqLens, stride_sl, bt_cap, programs, NUM_SPLITS: gl.constexpr, BLOCK_KV: gl.constexpr, WARPS: gl.constexpr
):
    """``bounds.balanced_chunk``, its loads in a Gluon layout."""
    BLOCK_R: gl.constexpr = 128
    LR: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    num_reqs = gl.num_programs(0)
    total = (num_reqs * 0).to(gl.int64)
    longest = total
    for i in range(0, num_reqs, BLOCK_R):
        idx = i + gl.arange(0, BLOCK_R, layout=LR)
        sl = gl.load(SeqLens + idx.to(gl.int64) * stride_sl, mask=idx < num_reqs, other=0).to(gl.int64)
        sl = gl.minimum(gl.maximum(sl, 0), bt_cap)
        total += gl.sum(sl, axis=0)
        longest = gl.maximum(longest, gl.max(sl, axis=0))
    return _balanced_chunk_of(total, longest, bt_cap, programs, NUM_SPLITS, BLOCK_KV)


# key_lut's selector function and value_words' column map, compiled as Gluon (a Gluon
# kernel cannot call a Triton function)
_selectors = gluon.jit(selectors_fn)
_magnitude_selectors = gluon.jit(magnitude_selectors_fn)
_value_columns = gluon.jit(value_columns_fn)


@gluon.jit
def _sel1(w0, w1, w2, G: gl.constexpr, STEP: gl.constexpr):
    return gl.join(_selectors(w0, w1, w2, G), _selectors(w0, w1, w2, G + STEP))


@gluon.jit
def _sel2(w0, w1, w2, G: gl.constexpr, STEP: gl.constexpr):
    return gl.join(_sel1(w0, w1, w2, G, 2 * STEP), _sel1(w0, w1, w2, G + STEP, 2 * STEP))


@gluon.jit
def _lut_keys(w0, w1, w2, la, lb, ha, hb):
    """fp16 centroids ``[NB, TPB, C, 2, 2, 2, 2, 2]`` of 3-bit chunks (words ``[NB, TPB, C]``
    each; position order once the last five axes are flattened), and each chunk's float32
    sum of squared centroids ``[NB, TPB, C]``: ``key_lut.lut_keys``'
    register-table lookup, four codes per ``prmt`` pair (``lut_ptx.LUT_PAIRS_PTX``: the
    centroids come out as fp16 pairs in 32-bit registers, which the shared-memory store
    takes as they are)."""
    # [..., 2, 2, 2]: group 4 a + 2 b + c at [a, b, c]
    sel = gl.join(_sel2(w0, w1, w2, 0, 2), _sel2(w0, w1, w2, 1, 2))
    z = sel * 0
    a, b, sq = gl.inline_asm_elementwise(
        LUT_PAIRS_PTX,
        "=r,=r,=f,r,r,r,r,r",
        [sel, z + la, z + lb, z + ha, z + hb],
        dtype=(gl.uint32, gl.uint32, gl.float32),
        is_pure=True,
        pack=1,
    )
    # [..., 2, 2]: centroid 2 i + j at [i, j]
    k = _halves(gl.join(a, b)).to(gl.float16, bitcast=True)
    return k, gl.sum(gl.sum(gl.sum(sq, axis=5), axis=4), axis=3)


@gluon.jit
def _lut16_keys(w, la, lb, ha, hb):
    """fp16 centroids ``[NB, TPB, W, 2, 2, 2]`` of 4-bit codes of a symmetric codebook
    (words ``[NB, TPB, W]``, 8 codes each, low nibble first; position order once the last
    four axes are flattened), and each word's float32 sum of squared centroids
    ``[NB, TPB, W]``: ``key_lut.lut16_values``' register-table lookup, four codes per
    lookup (``lut_ptx.LUT16_PAIRS_PTX``: the signed centroids come out as fp16 pairs in
    32-bit registers)."""
    # [..., 2]: a word's low half (codes 0-3) first; the lookup reads bits 0-15 of its
    # selectors and codes, so the low half needs no mask
    sel = _magnitude_selectors(w)
    sel = gl.join(sel, sel >> 16)
    z = sel * 0
    a, b, sq = gl.inline_asm_elementwise(
        LUT16_PAIRS_PTX,
        "=r,=r,=f,r,r,r,r,r,r",
        [sel, gl.join(w, w >> 16), z + la, z + lb, z + ha, z + hb],
        dtype=(gl.uint32, gl.uint32, gl.float32),
        is_pure=True,
        pack=1,
    )
    # [..., 2, 2, 2]: code 4 h + 2 i + j of a word at [h, i, j]
    k = _halves(gl.join(a, b)).to(gl.float16, bitcast=True)
    return k, gl.sum(sq, axis=3)


# a jit function reads no other globals than constexprs
_SYMMETRIC_PAIRS = gl.constexpr(SYMMETRIC_PAIRS_PTX)


@gluon.jit
def _symmetric_values(w):
    """fp16 ``code - 7.5`` ``[NB, TPB, W, 2, 2, 2]`` of tq_k4v4's symmetric 4-bit codes (words
    ``[NB, TPB, W]``, uint32, 8 codes each, low nibble first), in :func:`_lut16_keys`' order
    (code ``4 h + 2 i + j`` of a word at ``[h, i, j]``): ``token_rows_ptx.SYMMETRIC_PAIRS_PTX``,
    four codes per step, no table."""
    a, b = gl.inline_asm_elementwise(
        _SYMMETRIC_PAIRS,
        "=r,=r,r",
        [gl.join(w, w >> 16)],
        dtype=(gl.uint32, gl.uint32),
        is_pure=True,
        pack=1,
    )
    return _halves(gl.join(a, b)).to(gl.float16, bitcast=True)


@gluon.jit
def _lookup_tile(w0, w1, w2, table, BLOCK_KV: gl.constexpr, D: gl.constexpr, S2: gl.constexpr, BITS: gl.constexpr):
    """A tile of 3- or 4-bit codebook codes (``BITS``; :func:`_load_tile`'s words: for 4-bit
    codes ``w1`` and ``w2`` are ``w0``) looked up in ``table`` (the register table's four
    words): fp16 centroids ``[BLOCK_KV, D]`` in head_dim order and each position's float32
    sum of squared centroids ``[NB, TPB]`` in layout ``S2``."""
    la, lb, ha, hb = table
    if BITS == 3:
        c16, cn2 = _lut_keys(
            w0.to(gl.uint32, bitcast=True),
            w1.to(gl.uint32, bitcast=True),
            w2.to(gl.uint32, bitcast=True),
            la,
            lb,
            ha,
            hb,
        )
    else:
        c16, cn2 = _lut16_keys(w0.to(gl.uint32, bitcast=True), la, lb, ha, hb)
    return gl.reshape(c16, [BLOCK_KV, D]), gl.convert_layout(gl.sum(cn2, axis=2), S2)


@gluon.jit
def _nibble_word(w0, w1, w2, G: gl.constexpr):
    """Codes ``4 G .. 4 G + 7`` of a 3-bit chunk (words ``w0, w1, w2``, uint32) in the
    nibbles of one word, low nibble first (``key_lut.selectors_fn``' groups ``G`` and
    ``G + 1``, 16 bits apart)."""
    return _selectors(w0, w1, w2, G) | (_selectors(w0, w1, w2, G + 1) << 16)


@gluon.jit
def _value_chunks_to_words(w0, w1, w2):
    """3-bit value codes, 32-code chunks of three words ``[..., C]`` each, as the 4-bit
    value words ``[..., C, 2, 2]`` that hold the same codes (word ``2 a + b`` of chunk
    ``C`` at ``[C, a, b]``: codes ``8 (2 a + b) .. + 7``), so that
    :func:`_value_words_to_fp16` decodes both widths into one column order."""
    return gl.join(
        gl.join(_nibble_word(w0, w1, w2, 0), _nibble_word(w0, w1, w2, 4)),
        gl.join(_nibble_word(w0, w1, w2, 2), _nibble_word(w0, w1, w2, 6)),
    )


@gluon.jit
def _butterflies(x, T: gl.constexpr, D: gl.constexpr, FIRST: gl.constexpr, LAST: gl.constexpr):
    """Stages ``FIRST .. LAST - 1`` of the unnormalised Sylvester Hadamard of each row of
    float32 ``x`` ``[T, D]`` (``hadamard.fwht_rows``' butterflies); each stage's pairs must
    lie inside one thread."""
    for stage in gl.static_range(FIRST, LAST):
        y = gl.permute(gl.reshape(x, [T, D >> (stage + 1), 2, 1 << stage]), (0, 1, 3, 2))
        a, b = gl.split(y)
        y = gl.join(a + b, a - b)
        x = gl.reshape(gl.permute(y, (0, 1, 3, 2)), [T, D])
    return x


@gluon.jit
def register_table(Table):
    """``key_lut.lut_words``' four table words at ``Table``, as uint32 (read once, before the
    loops)."""
    words = Table.to(gl.pointer_type(gl.int32))
    return (
        gl.load(words).to(gl.uint32, bitcast=True),
        gl.load(words + 1).to(gl.uint32, bitcast=True),
        gl.load(words + 2).to(gl.uint32, bitcast=True),
        gl.load(words + 3).to(gl.uint32, bitcast=True),
    )


@gluon.jit
def load_blocks(start, where, BL: gl.constexpr, NB: gl.constexpr, TPB: gl.constexpr, BLOCK_SIZE: gl.constexpr):
    """The block id of each of the tile's ``NB`` groups at ``start`` ``[NB]`` (0 from ``hi``
    on), clamped to ``last_block``: a block id outside ``[0, num_blocks)`` is read as the
    last block. ``where``: as :func:`_load_tile`'s."""
    bt_row, stride_bc, _, _, hi, last_block = where
    gpos = start + gl.arange(0, NB, layout=BL) * TPB
    blk = gl.load(bt_row + (gpos // BLOCK_SIZE) * stride_bc, mask=gpos < hi, other=0)
    if blk.dtype == gl.int32:
        return gl.minimum(blk.to(gl.uint32, bitcast=True), last_block.to(gl.uint32))
    else:
        return gl.minimum(blk.to(gl.int64).to(gl.uint64, bitcast=True), last_block.to(gl.uint64))


@gluon.jit
def _load_tile(
    start,
    blk,
    where,
    offsets,
    BL: gl.constexpr,
    BLV: gl.constexpr,
    NB: gl.constexpr,
    TPB: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    KEY_OFF: gl.constexpr,
    KEY_BYTES: gl.constexpr,
    NORM_OFF: gl.constexpr,
    VAL_OFF: gl.constexpr,
    VAL_BYTES: gl.constexpr,
    SCALE_OFF: gl.constexpr,
    ZERO_OFF: gl.constexpr,
    KEY_FP8: gl.constexpr,
    KBITS: gl.constexpr,
    VBITS: gl.constexpr,
    CALIBRATED: gl.constexpr,
):
    """Issue the loads of the tile at ``start`` in blocks ``blk`` (:func:`load_blocks`;
    nothing from ``hi`` on): key words ``[NB, TPB, W]`` (fp8: ``W = D // 4``, four bytes
    per word; 3-bit codes: the three words ``k0, k1, k2`` of each 32-code chunk,
    ``W = D // 32``; 4-bit codes: ``W = D // 8``, eight codes per word, in ``k0``; where a
    key has one word array, ``k1`` and ``k2`` are ``k0``), the key norms ``[NB, TPB]``
    (codebook keys; fp8 keys return the value scales there), value words (4-bit codes:
    ``v0`` ``[NB, TPB, D // 8]``, ``v1`` and ``v2`` are ``v0``; 3-bit codes: the three words
    ``v0, v1, v2`` ``[NB, TPB, D // 32]`` of each 32-code chunk), value scales and zero
    points ``[NB, TPB]`` (calibrated formats: the value norms, and no zero points, whose
    place holds the norms again). ``where``: ``(bt_row, stride_bc, head_base, stride_blk, hi,
    last_block)``; ``offsets``: ``(kofs, vofs, tok_k, tok_v, tok_s)``, each word's offset
    inside its group (loop-invariant) and each element's position inside its group (for the
    mask and the fp16 fields' offsets)."""
    _, _, head_base, stride_blk, hi, _ = where
    kofs, vofs, tok_k, tok_v, tok_s = offsets
    gpos = start + gl.arange(0, NB, layout=BL) * TPB
    # cache_fields' addressing rule, restated per group: the group's block, then each
    # field's OFF + first * WIDTH, then each element's offset inside the group
    base = head_base + blk.to(gl.int64) * stride_blk
    first = (gpos % BLOCK_SIZE).to(gl.int64)
    left = hi - gpos  # positions of the group still before hi

    krow = (base + KEY_OFF + first * KEY_BYTES).to(gl.pointer_type(gl.int32))[:, None, None] + kofs
    kmask = tok_k < left[:, None, None]
    k0 = gl.load(krow, mask=kmask, other=0)
    vbase = gl.convert_layout(base + VAL_OFF + first * VAL_BYTES, BLV, assert_trivial=True)
    vleft = gl.convert_layout(left, BLV, assert_trivial=True)
    vrow = vbase.to(gl.pointer_type(gl.int32))[:, None, None] + vofs
    vmask = tok_v < vleft[:, None, None]
    v0 = gl.load(vrow, mask=vmask, other=0)
    sb = base + first * 2
    smask = tok_s < left[:, None]
    vs = gl.load((sb + SCALE_OFF).to(gl.pointer_type(gl.float16))[:, None] + tok_s, mask=smask, other=0.0)
    if CALIBRATED:
        vz = vs
    else:
        vz = gl.load((sb + ZERO_OFF).to(gl.pointer_type(gl.float16))[:, None] + tok_s, mask=smask, other=0.0)
    if KBITS == 3:
        k1 = gl.load(krow + 1, mask=kmask, other=0)
        k2 = gl.load(krow + 2, mask=kmask, other=0)
    else:
        k1 = k0
        k2 = k0
    if KEY_FP8:
        kn = vs
    else:
        kn = gl.load((sb + NORM_OFF).to(gl.pointer_type(gl.float16))[:, None] + tok_s, mask=smask, other=0.0)
    if VBITS == 3:
        v1 = gl.load(vrow + 1, mask=vmask, other=0)
        v2 = gl.load(vrow + 2, mask=vmask, other=0)
    else:
        v1 = v0
        v2 = v0
    return k0, k1, k2, kn, v0, v1, v2, vs, vz


@gluon.jit
def _decode_into(
    tile,
    bufs,
    lut,
    vlut,
    BLOCK_KV: gl.constexpr,
    D: gl.constexpr,
    S2: gl.constexpr,
    KEY_FP8: gl.constexpr,
    KBITS: gl.constexpr,
    VBITS: gl.constexpr,
    NORM_CORRECTION: gl.constexpr,
    CALIBRATED: gl.constexpr,
    INT_VALUES: gl.constexpr = False,
):
    """Decode a loaded tile (:func:`_load_tile`'s tuple) into the shared buffers ``bufs``
    ``(keys, values, value scales, zero points, key norms)``: fp8 -> fp16 keys, or 3- or
    4-bit codes (``KBITS``) -> fp16 centroids (``lut``: the register table's four words,
    of the codebook's magnitudes for 4-bit codes) and each key's norm over its centroids'
    norm (``NORM_CORRECTION``); 4-bit values -> code - 8, two per 32-bit operation (nibbles
    J and J + 4 sit 16 bits apart, 0x6400 | code is the fp16 1024 + code); 3-bit values
    -> code - 4, their chunks first moved to the nibbles of 4-bit words
    (:func:`_value_chunks_to_words`), so that both widths leave the same column order.
    ``CALIBRATED``: the values are 3- or 4-bit Lloyd-Max codes, looked up as the keys are
    (``vlut``: the value codebook's register table) into head_dim order, and the value
    scales buffer (float32) takes each value's scale (stored as its norm over its
    centroids' norm, ``Preset.folds_norm``; divided here only with ``NORM_CORRECTION``);
    the zero points buffer is not written. ``INT_VALUES``: tq_k4v4's symmetric values as
    ``code - 7.5`` from their bits (:func:`_symmetric_values`), their scales times 1/8 (the
    table's ``(2 code - 15) / 16``), no lookup."""
    kb, kb1, kb2, kn, vw, vw1, vw2, vs, vz = tile
    k_buf, v_buf, sc_buf, zr_buf, kn_buf = bufs
    if KEY_FP8:
        k16 = gl.reshape(_fp8_words_to_fp16(kb), [BLOCK_KV, D])
    else:
        k16, cn2 = _lookup_tile(kb, kb1, kb2, lut, BLOCK_KV, D, S2, KBITS)
        knorm = kn.to(gl.float32)
        if NORM_CORRECTION:
            knorm = gl.where(cn2 > 0, knorm * gl.rsqrt(cn2), 0.0)
        kn_buf.store(gl.reshape(knorm, [BLOCK_KV]))
    if CALIBRATED:
        # the key tile leaves the registers before the values are looked up: both tables'
        # results live at once would spill
        k_buf.store(k16)
        if INT_VALUES:
            v16 = gl.reshape(_symmetric_values(vw.to(gl.uint32, bitcast=True)), [BLOCK_KV, D])
            vscale = vs.to(gl.float32) * 0.125
        else:
            v16, vcn2 = _lookup_tile(vw, vw1, vw2, vlut, BLOCK_KV, D, S2, VBITS)
            # each value's scale; the sums of squares the lookup returns are dead code unless
            # the decoder corrects the norm (ptxas removes them)
            vscale = vs.to(gl.float32)
            if NORM_CORRECTION:
                vscale = gl.where(vcn2 > 0, vscale * gl.rsqrt(vcn2), 0.0)
        v_buf.store(v16)
        sc_buf.store(gl.reshape(vscale, [BLOCK_KV]))
    else:
        if VBITS == 3:
            vw = _value_chunks_to_words(
                vw.to(gl.uint32, bitcast=True), vw1.to(gl.uint32, bitcast=True), vw2.to(gl.uint32, bitcast=True)
            )
        v16 = gl.reshape(_value_words_to_fp16(vw), [BLOCK_KV, D]) - (1024.0 + (1 << (VBITS - 1)))
        k_buf.store(k16)
        v_buf.store(v16)
        sc_buf.store(gl.reshape(vs, [BLOCK_KV]))
        zr_buf.store(gl.reshape(vz, [BLOCK_KV]))


@gluon.jit
def gluon_attention_kernel(
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
    G: gl.constexpr,
    G_PAD: gl.constexpr,
    NUM_Q_HEADS: gl.constexpr,
    NUM_SPLITS: gl.constexpr,
    BLOCK_Q: gl.constexpr,
    BLOCK_KV: gl.constexpr,
    D: gl.constexpr,
    LOG2_D: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    HEAD_STRIDE: gl.constexpr,
    KEY_OFF: gl.constexpr,
    KEY_BYTES: gl.constexpr,
    NORM_OFF: gl.constexpr,
    VAL_OFF: gl.constexpr,
    VAL_BYTES: gl.constexpr,
    SCALE_OFF: gl.constexpr,
    ZERO_OFF: gl.constexpr,
    KEY_FP8: gl.constexpr,
    KBITS: gl.constexpr,
    VBITS: gl.constexpr,
    NORM_CORRECTION: gl.constexpr,
    SATURATE_QUERY: gl.constexpr,
    WARPS: gl.constexpr,
    BALANCE: gl.constexpr = False,
    WGMMA: gl.constexpr = False,
    SKIP_EMPTY: gl.constexpr = False,
    CALIBRATED: gl.constexpr = False,
    INT_VALUES: gl.constexpr = False,
):
    """``WARPS``: the launch's warps, ``BLOCK_Q * G_PAD / 16`` (one per 16 query rows), at
    most 4. Keys fp8 or 3- or 4-bit codebook codes (``KBITS``; ``Centroids`` is then
    ``key_lut.lut_words``' table, of the magnitudes for a 4-bit codebook; unused for fp8),
    values uniform 4-bit codes, or 3-bit codes with codebook keys (``VBITS``; see
    ``plan.gluon_refusal``). ``CALIBRATED`` (tq's calibrated formats with 4-bit keys and 3-
    or 4-bit values): the calibration pointers and ``VCentroids`` (the value codebook's
    register table) are read as ``kernel.attention_kernel`` reads them; otherwise they are
    not read. ``INT_VALUES`` (tq_k4v4, set from the preset): its symmetric values
    from their codes' bits, ``VCentroids`` not read. The other constexprs are
    ``kernel.attention_kernel``'s."""
    BLOCK_M: gl.constexpr = BLOCK_Q * G_PAD
    gl.static_assert(not WGMMA or BLOCK_M == 64, "WGMMA: 64 rows")
    # positions per group: consecutive positions of one cache block
    TPB: gl.constexpr = BLOCK_KV if BLOCK_KV < BLOCK_SIZE else BLOCK_SIZE
    NB: gl.constexpr = BLOCK_KV // TPB
    # WGMMA (one warpgroup of 4 warps, 64 rows, sm_90): Hopper's warpgroup products read
    # the query, key and value tiles from shared memory once per tile for all four warps;
    # otherwise each warp reads them as its own mma.sync operand fragments. MMA: the
    # scores' layout; MMAO: the accumulator's (the same for mma.sync)
    MMA: gl.constexpr = (
        gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BLOCK_KV, 16])
        if WGMMA
        else gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    )
    MMAO: gl.constexpr = (
        gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, D, 16]) if WGMMA else MMA
    )
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMAO, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    ROW: gl.constexpr = gl.SliceLayout(1, MMA)
    COL: gl.constexpr = gl.SliceLayout(0, MMA)
    ROWO: gl.constexpr = gl.SliceLayout(1, MMAO)
    COLO: gl.constexpr = gl.SliceLayout(0, MMAO)
    # key words [NB, TPB, W], TD threads along head_dim, lanes and warps along the group's
    # positions, the groups in registers. fp8: W = D // 4, 4 words (16 keys) per thread;
    # 3-bit codes: W = D // 32 chunks, one chunk (32 codes, 3 words) per thread; 4-bit
    # codes: W = D // 8, 4 words (32 codes, one 16-byte load) per thread. Warps that the
    # group's positions cannot take (codebook codes at head_dim 128: 8 positions per warp,
    # so 2 warps per 16-position block) go along the groups, so that no two warps decode
    # the same keys
    TD: gl.constexpr = D // 16 if KEY_FP8 else D // 32
    KW: gl.constexpr = 1 if KBITS == 3 else 4
    WP: gl.constexpr = max(min(WARPS, TPB // (32 // TD)), 1)
    K3: gl.constexpr = gl.BlockedLayout([1, 1, KW], [1, 32 // TD, TD], [WARPS // WP, WP, 1], [2, 1, 0])
    # value words [NB, TPB, VW]: 4-bit codes VW = D // 8, D // 8 / TD words per thread; 3-bit
    # codes VW = D // 32 chunks (3 words each), one per thread (codebook keys: TD = D // 32).
    # The keys' positions per thread, so one address per group serves both
    gl.static_assert(VBITS == 4 or (VBITS == 3 and not KEY_FP8), "values: 4 bits, or 3 with codebook keys")
    VW: gl.constexpr = D // 8 if VBITS == 4 else D // 32
    V3: gl.constexpr = gl.BlockedLayout([1, 1, VW // TD], [1, 32 // TD, TD], [WARPS // WP, WP, 1], [2, 1, 0])
    S2: gl.constexpr = gl.SliceLayout(2, K3)
    BL: gl.constexpr = gl.SliceLayout(1, S2)
    BLV: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, V3))
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (D // 8), D // 8], [WARPS, 1], [1, 0])
    # the query's Hadamard transform: each row over two lanes, as halves (QH) for every
    # butterfly stage but the last, as even and odd elements (QE) for the last
    QH: gl.constexpr = gl.BlockedLayout([1, D // 2], [16, 2], [WARPS, 1], [1, 0])
    QE: gl.constexpr = gl.BlockedLayout([1, 1], [16, 2], [WARPS, 1], [1, 0])
    SMEM: gl.constexpr = (
        gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        if WGMMA
        else gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
    )

    r = gl.program_id(0)
    h = gl.program_id(1)
    split = gl.program_id(2)
    chunk = 0
    if BALANCE:
        chunk = _balanced_chunk(SeqLens, stride_sl, bt_cap, split_programs, NUM_SPLITS, BLOCK_KV, WARPS)
    seq_len, q_start, q_len, kv_lo, kv_hi = _request_bounds(
        SeqLens, QueryStart, stride_sl, stride_qs, bt_cap, num_query_rows, chunk, NUM_SPLITS, BLOCK_KV, BALANCE
    )
    head_base = Cache + h.to(gl.int64) * HEAD_STRIDE
    bt_row = BlockTable + r.to(gl.int64) * stride_bt

    # one shared buffer per tile: decode, barrier, read, barrier
    SMEM1: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
    k_s = gl.allocate_shared_memory(gl.float16, [BLOCK_KV, D], SMEM)
    v_s = gl.allocate_shared_memory(gl.float16, [BLOCK_KV, D], SMEM)
    q_s = gl.allocate_shared_memory(gl.float16, [BLOCK_M, D], SMEM)
    if CALIBRATED:
        # the value scales in float32, as the portable kernel reads them; no zero points
        sc_s = gl.allocate_shared_memory(gl.float32, [BLOCK_KV], SMEM1)
        zr_s = sc_s
        vlut = (0, 0, 0, 0) if INT_VALUES else register_table(VCentroids)
    else:
        sc_s = gl.allocate_shared_memory(gl.float16, [BLOCK_KV], SMEM1)
        zr_s = gl.allocate_shared_memory(gl.float16, [BLOCK_KV], SMEM1)
        vlut = (0, 0, 0, 0)
    if KEY_FP8:
        kn_s = sc_s  # unused
        lut = (0, 0, 0, 0)
    else:
        kn_s = gl.allocate_shared_memory(gl.float32, [BLOCK_KV], SMEM1)
        lut = register_table(Centroids)

    # loop-invariant offsets of each element inside its group
    tk = gl.arange(0, TPB, layout=gl.SliceLayout(0, S2))
    dk = gl.arange(0, TD * KW, layout=gl.SliceLayout(0, gl.SliceLayout(1, K3)))
    tok_k = tk[None, :, None]
    kofs = tok_k * (KEY_BYTES // 4) + dk[None, None, :] * (3 if KBITS == 3 else 1)
    tv = gl.arange(0, TPB, layout=gl.SliceLayout(0, gl.SliceLayout(2, V3)))
    wv = gl.arange(0, VW, layout=gl.SliceLayout(0, gl.SliceLayout(1, V3)))
    tok_v = tv[None, :, None]
    vofs = tok_v * (VAL_BYTES // 4) + wv[None, None, :] * (3 if VBITS == 3 else 1)
    tok_s = tk[None, :]
    offsets = (kofs, vofs, tok_k, tok_v, tok_s)
    bufs = (k_s, v_s, sc_s, zr_s, kn_s)
    # column c of the value tile holds head_dim index value_columns(c) (see value_words.py;
    # calibrated formats' values are looked up in head_dim order)
    dcol = gl.arange(0, D, layout=COLO)
    dout = _value_columns(dcol)

    for qc in range(0, q_len, BLOCK_Q):
        # SKIP_EMPTY: a split with no position for this query chunk only marks its rows
        # empty (kernel.py's attention_kernel says why). Its row indices are its own: the
        # branch below computes them after the query's load, and moving them up here changes
        # the code compiled without SKIP_EMPTY (static counts, Triton 3.6), which is timed
        if SKIP_EMPTY and kv_lo >= gl.minimum(kv_hi, seq_len - q_len + gl.minimum(qc + BLOCK_Q, q_len)):
            e_m = gl.arange(0, BLOCK_M, layout=ROW)
            e_tok = qc + e_m // G_PAD
            e_slot = ((q_start + e_tok).to(gl.int64) * NUM_Q_HEADS + h * G + e_m % G_PAD) * NUM_SPLITS + split
            e_ok = (e_tok < q_len) & (e_m % G_PAD < G)
            gl.store(Lse + e_slot, gl.full([BLOCK_M], float("-inf"), gl.float32, ROW), mask=e_ok)
        else:
            QLOAD: gl.constexpr = QL if KEY_FP8 else QH
            mq = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, QLOAD))
            dq = gl.arange(0, D, layout=gl.SliceLayout(0, QLOAD))
            tok_q = qc + mq // G_PAD
            ok_q = (tok_q < q_len) & (mq % G_PAD < G)
            q = gl.load(
                Q
                + (q_start + tok_q).to(gl.int64)[:, None] * stride_qt
                + (h * G + mq % G_PAD)[:, None] * stride_qh
                + dq[None, :],
                mask=ok_q[:, None],
                other=0.0,
            ).to(gl.float32)
            # a NaN or ±inf query element makes its row NaN, as in tq_core (kernel.py says why
            # the scores alone do not)
            q_bad = _nonfinite_rows(q)
            first_bias = gl.zeros([BLOCK_M], gl.float32, ROW)
            if KEY_FP8:
                q = q * q_mul
            elif CALIBRATED:
                # kernel.py's calibrated query: position 0's score term (q * q_mul) . (mu0 - mu),
                # and the query divided by the key gain before it is rotated
                # the vectors read and divided with D / (32 WARPS) channels per thread, then
                # spread to the query's layout
                CV: gl.constexpr = gl.BlockedLayout([max(D // (32 * WARPS), 1)], [32], [WARPS], [0])
                ch = h.to(gl.int64) * D + gl.arange(0, D, layout=CV)
                shift = gl.load(KeyFirstOffset + ch) - gl.load(KeyOffset + ch)
                q_cols = (q_mul / gl.sqrt(D * 1.0)) / gl.load(KeyGain + ch)
                shift = gl.convert_layout(shift, gl.SliceLayout(0, QH))
                q_cols = gl.convert_layout(q_cols, gl.SliceLayout(0, QH))
                first_bias = gl.convert_layout(gl.sum(q * q_mul * shift[None, :], axis=1), ROW)
                q = q * q_cols[None, :]
                q = _butterflies(q, BLOCK_M, D, 0, LOG2_D - 1)
                q = _butterflies(gl.convert_layout(q, QE), BLOCK_M, D, LOG2_D - 1, LOG2_D)
            else:
                # scores in the rotated domain: the query's orthonormal Hadamard transform,
                # scaled before the butterflies sum it so that they cannot overflow (kernel.py)
                q = q * (q_mul / gl.sqrt(D * 1.0))
                q = _butterflies(q, BLOCK_M, D, 0, LOG2_D - 1)
                q = _butterflies(gl.convert_layout(q, QE), BLOCK_M, D, LOG2_D - 1, LOG2_D)
            if SATURATE_QUERY:
                q = _saturate(q)
            # kept in shared memory, read as A operand fragments per tile: fewer live registers
            _barrier()  # every warp is done with the previous chunk's query
            q_s.store(q.to(gl.float16, fp_downcast_rounding="rtz"))

            m = gl.arange(0, BLOCK_M, layout=ROW)
            row_tok = qc + m // G_PAD
            row_ok = (row_tok < q_len) & (m % G_PAD < G)
            row_pos = seq_len - q_len + row_tok
            q_row = (q_start + row_tok).to(gl.int64)
            head = h * G + m % G_PAD

            m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, ROW)
            l_i = gl.zeros([BLOCK_M], gl.float32, ROW)
            r_i = gl.zeros([BLOCK_M], gl.float32, ROW)
            acc = gl.zeros([BLOCK_M, D], gl.float32, MMAO)
            f_i = gl.to_tensor(0.0)  # the value scales' reference (set by the first tile)
            hi = gl.minimum(kv_hi, seq_len - q_len + gl.minimum(qc + BLOCK_Q, q_len))
            # a tile that ends before this bound is visible to every row of the chunk
            unmasked_hi = gl.minimum(hi, seq_len - q_len + qc + 1)

            where = (bt_row, stride_bc, head_base, stride_blk, hi, last_block)
            tile = _load_tile(
                kv_lo,
                load_blocks(kv_lo, where, BL, NB, TPB, BLOCK_SIZE),
                where,
                offsets,
                BL,
                BLV,
                NB,
                TPB,
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
                CALIBRATED,
            )
            # the block ids of the tile after the one in flight
            blk = load_blocks(kv_lo + BLOCK_KV, where, BL, NB, TPB, BLOCK_SIZE)
            for start in range(kv_lo, hi, BLOCK_KV):
                current = tile
                # each tile's loads are issued one iteration before it is read, its block ids
                # one iteration before that
                tile = _load_tile(
                    start + BLOCK_KV,
                    blk,
                    where,
                    offsets,
                    BL,
                    BLV,
                    NB,
                    TPB,
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
                    CALIBRATED,
                )
                blk = load_blocks(start + 2 * BLOCK_KV, where, BL, NB, TPB, BLOCK_SIZE)
                _barrier()  # every warp has read the previous tile
                _decode_into(
                    current,
                    bufs,
                    lut,
                    vlut,
                    BLOCK_KV,
                    D,
                    S2,
                    KEY_FP8,
                    KBITS,
                    VBITS,
                    NORM_CORRECTION,
                    CALIBRATED,
                    INT_VALUES,
                )
                if WGMMA:
                    # the decoded tiles (and the query) were written by ordinary stores; the
                    # warpgroup product reads them through the async proxy
                    fence_async_shared()
                    _barrier()
                    s = warpgroup_mma(
                        q_s, k_s.permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_KV], gl.float32, MMA), use_acc=False
                    )
                else:
                    _barrier()
                    s = mma_v2(
                        q_s.load(A_OP), k_s.permute((1, 0)).load(B_OP), gl.zeros([BLOCK_M, BLOCK_KV], gl.float32, MMA)
                    )
                if not KEY_FP8:
                    s = s * kn_s.load(COL)[None, :]
                # nested, so that the compile-time test leaves no runtime one in other formats
                if CALIBRATED:  # noqa: SIM102
                    if start == 0:
                        first = start + gl.arange(0, BLOCK_KV, layout=COL) == 0
                        s = s + gl.where(first[None, :], first_bias[:, None], 0.0)
                if start + BLOCK_KV > unmasked_hi:
                    pos = start + gl.arange(0, BLOCK_KV, layout=COL)
                    visible = row_ok[:, None] & (pos[None, :] < hi) & (pos[None, :] <= row_pos[:, None])
                    s = gl.where(visible, s, float("-inf"))
                # online_softmax's tile step. The accumulator is rescaled on every tile: testing
                # whether any row's factor differs from 1 is a reduction over the program's
                # warps (two barriers), which costs more than the multiplies
                vscale = sc_s.load(COL).to(gl.float32)
                m_i, l_i, f_i, w, factor, p, alpha = _tile_step(s, q_scale, m_i, l_i, f_i, vscale)
                w = gl.convert_layout(w, A_OP)
                if WGMMA:
                    acc = warpgroup_mma(w, v_s, acc * gl.convert_layout(factor, ROWO)[:, None])
                else:
                    acc = mma_v2(w, v_s.load(B_OP), acc * factor[:, None])
                if CALIBRATED:
                    # r sums the probability of position 0 (kernel.py)
                    first = start + gl.arange(0, BLOCK_KV, layout=COL) == 0
                    r_i = _row_sum(r_i, alpha, p, first.to(gl.float32))
                else:
                    r_i = _row_sum(r_i, alpha, p, _value_mid(zr_s.load(COL), vscale, VBITS))

            a, b = _output_factors(l_i, r_i, f_i, gl.convert_layout(q_bad, ROW))
            if CALIBRATED:
                # b is the probability of position 0; the accumulator is rotated: rotate each row
                # back (the orthonormal Hadamard transform, in the query's layouts), divide by the
                # value gain and add nu + b (nu0 - nu), nu only where the row saw a key, as
                # kernel.py does
                o = acc * gl.convert_layout(a / gl.sqrt(D * 1.0), ROWO)[:, None]
                o = _butterflies(gl.convert_layout(o, QH), BLOCK_M, D, 0, LOG2_D - 1)
                o = _butterflies(gl.convert_layout(o, QE), BLOCK_M, D, LOG2_D - 1, LOG2_D)
                # then 8 neighbouring columns per thread (QL): the calibration vectors are read
                # as 16-byte loads, each thread divides by 8 gains, and the rows leave in
                # vector stores
                o = gl.convert_layout(o, QL)
                dc = gl.arange(0, D, layout=gl.SliceLayout(0, QL))
                ch_o = h.to(gl.int64) * D + dc
                nu = gl.load(ValueOffset + ch_o)
                nu_first_shift = gl.load(ValueFirstOffset + ch_o) - nu
                inv_gain = 1.0 / gl.load(ValueGain + ch_o)
                b_o = gl.convert_layout(b, gl.SliceLayout(1, QL))
                seen = gl.convert_layout((l_i > 0).to(gl.float32), gl.SliceLayout(1, QL))
                o = o * inv_gain[None, :] + seen[:, None] * nu[None, :] + b_o[:, None] * nu_first_shift[None, :]
                m_o = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, QL))
                tok_o = qc + m_o // G_PAD
                row_ok_o = (tok_o < q_len) & (m_o % G_PAD < G)
                q_row_o = (q_start + tok_o).to(gl.int64)
                head_o = h * G + m_o % G_PAD
                out_cols = dc
                part_cols = dc
            elif WGMMA:
                o = acc * gl.convert_layout(a, ROWO)[:, None] + gl.convert_layout(b, ROWO)[:, None]
                q_row_o = gl.convert_layout(q_row, ROWO)
                head_o = gl.convert_layout(head, ROWO)
                row_ok_o = gl.convert_layout(row_ok, ROWO)
                out_cols = dout
                part_cols = dcol
            else:
                o = acc * a[:, None] + b[:, None]
                q_row_o = q_row
                head_o = head
                row_ok_o = row_ok
                out_cols = dout
                part_cols = dcol
            if NUM_SPLITS == 1:
                gl.store(
                    Out + q_row_o[:, None] * stride_ot + head_o[:, None] * stride_oh + out_cols[None, :],
                    o.to(Out.dtype.element_ty),
                    mask=row_ok_o[:, None],
                )
            else:
                slot = (q_row * NUM_Q_HEADS + head) * NUM_SPLITS + split
                slot_o = (q_row_o * NUM_Q_HEADS + head_o) * NUM_SPLITS + split
                # in the accumulator's column order (merge_kernel's VALUE_COLUMNS; head_dim order
                # for calibrated formats): pairs of neighbouring columns leave in one vector store
                gl.store(Partial + slot_o[:, None] * D + part_cols[None, :], o, mask=row_ok_o[:, None])
                gl.store(Lse + slot, _row_lse(m_i, l_i, gl.convert_layout(q_bad, ROW), SKIP_EMPTY), mask=row_ok)
