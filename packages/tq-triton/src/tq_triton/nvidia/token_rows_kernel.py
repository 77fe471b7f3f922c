"""The token-rows attention kernel (Gluon, NVIDIA): scores as ``S^T = K Q^T`` with the
tile's tokens on the matrix unit's rows, for launches of 8 or 16 query columns (a GQA
group's q heads, padded to a power of two, times the query tokens of a program): one or two
column tiles of 8, which share each decoded key chunk and value word.

Same arguments, results and memory rules as ``gluon_kernel.gluon_attention_kernel``, for
fp8, 3- or 4-bit codebook keys with uniform 4-bit values (k8v4, k3v4_nc, 4bit_nc), 3-bit keys
with uniform 3-bit values (3bit_nc), and 4-bit keys with 3-bit Lloyd-Max or 4-bit symmetric
values (tq's calibrated tq_k4v3, tq_k4v4), at head_dim 128 and block sizes of at least 16
(``attention.plan.token_rows_refusal``). Where the Gluon kernel decodes a
tile into shared memory and has each warp read it back as operand fragments, here one warp
decodes each key chunk and value word straight into the ``mma.sync`` operand registers that
multiply it (``token_rows_ptx`` says which thread holds what): no shared buffer, no barrier,
and a decode step of one query token with 4 q heads per kv head pads 4 of 8 columns, not
12 of 16 rows. One warp per program; ``BLOCK_KV`` is ``16 * MT`` tokens, ``MT`` row tiles.

The online softmax is ``attention.online_softmax``'s arithmetic (lazy maximum, lazy scale
reference, centred value codes), per query column: a thread keeps the maximum of its two
columns (all lanes of a column agree) and partial sums over its own tokens, added over the
column's 8 lanes at the end.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..attention.bounds import request_bounds_fn
from ..attention.online_softmax import nonfinite_rows_fn, output_factors_fn, row_lse_fn, saturate_fn
from ..value_words import nibbles_fn
from . import token_rows_ptx as ptx
from .gluon_kernel import _balanced_chunk, _butterflies, load_blocks, register_table

_request_bounds = gluon.jit(request_bounds_fn)
_output_factors = gluon.jit(output_factors_fn)
_row_lse = gluon.jit(row_lse_fn)
_nonfinite_rows = gluon.jit(nonfinite_rows_fn)
_saturate = gluon.jit(saturate_fn)
_nibbles = gluon.jit(nibbles_fn)

# the PTX as constexprs (a jit function reads no other globals)
_QK3_LO = gl.constexpr(ptx.qk3_ptx(0))
_QK3_HI = gl.constexpr(ptx.qk3_ptx(1))
_QK3_C = gl.constexpr(ptx.QK3_CONSTRAINTS)
_QK4 = gl.constexpr(ptx.qk4_ptx())
_QK4_C = gl.constexpr(ptx.QK4_CONSTRAINTS)
_QK8 = gl.constexpr(ptx.qk8_ptx())
_QK8_C = gl.constexpr(ptx.QK8_CONSTRAINTS)
_PV4 = gl.constexpr(ptx.pv4_ptx())
_PV4_C = gl.constexpr(ptx.PV4_CONSTRAINTS)
_QK3_LO2 = gl.constexpr(ptx.qk3_ptx(0, 2))
_QK3_HI2 = gl.constexpr(ptx.qk3_ptx(1, 2))
_QK3_2C = gl.constexpr(ptx.qk3_constraints(2))
_QK4_2 = gl.constexpr(ptx.qk4_ptx(2))
# the same with the key norms' sums of squares on the matrix unit (NORM_CORRECTION)
_QK3_LO_N = gl.constexpr(ptx.qk3_ptx(0, 1, True))
_QK3_HI_N = gl.constexpr(ptx.qk3_ptx(1, 1, True))
_QK3_LO2_N = gl.constexpr(ptx.qk3_ptx(0, 2, True))
_QK3_HI2_N = gl.constexpr(ptx.qk3_ptx(1, 2, True))
_QK4_N = gl.constexpr(ptx.qk4_ptx(1, True))
_QK4_2N = gl.constexpr(ptx.qk4_ptx(2, True))
_QK4_2C = gl.constexpr(ptx.qk4_constraints(2))
_QK8_2 = gl.constexpr(ptx.qk8_ptx(2))
_QK8_2C = gl.constexpr(ptx.qk8_constraints(2))
_PV3 = gl.constexpr(ptx.pv3_ptx())
_PV3_C = gl.constexpr(ptx.pv3_constraints())
_PV3_2 = gl.constexpr(ptx.pv3_ptx(2))
_PV3_2C = gl.constexpr(ptx.pv3_constraints(2))
_PV4_2 = gl.constexpr(ptx.pv4_ptx(2))
# symmetric values (tq_k4v4, INT_VALUES): code - 7.5 from the code's bits
_PV4S = gl.constexpr(ptx.pv4_ptx(1, True))
_PV4S_2 = gl.constexpr(ptx.pv4_ptx(2, True))
_PV4_2C = gl.constexpr(ptx.pv4_constraints(2))
_PVL3 = gl.constexpr(ptx.pvl_ptx(1))
_PVL3_C = gl.constexpr(ptx.pvl_constraints(1))
_PVL3_2 = gl.constexpr(ptx.pvl_ptx(2))
_PVL3_2C = gl.constexpr(ptx.pvl_constraints(2))
_PAIR_T = gl.constexpr(ptx.PAIR_TRANSPOSED_PTX)
_PAIR_T_C = gl.constexpr(ptx.PAIR_TRANSPOSED_CONSTRAINTS)


@gluon.jit
def _split2(x):
    """``x`` ``[..., 2 N]`` as its even and odd elements along the last axis."""
    shape: gl.constexpr = x.shape
    return gl.split(gl.reshape(x, [shape[0], shape[1], shape[2] // 2, 2]))


@gluon.jit
def _last(x, L2: gl.constexpr):
    """``x`` ``[8, 4, 1]`` as ``[8, 4]`` in ``L2``."""
    return gl.convert_layout(gl.reshape(x, [8, 4]), L2, assert_trivial=True)


@gluon.jit
def _unstack2(x, L2: gl.constexpr):
    a, b = _split2(x)
    return _last(a, L2), _last(b, L2)


@gluon.jit
def _unstack4(x, L2: gl.constexpr):
    """``[8, 4, 4]`` -> four ``[8, 4]`` in ``L2``, in index order."""
    e, o = _split2(x)  # 0, 2 | 1, 3
    a0, a2 = _unstack2(e, L2)
    a1, a3 = _unstack2(o, L2)
    return a0, a1, a2, a3


@gluon.jit
def _unstack8(x, L2: gl.constexpr):
    e, o = _split2(x)  # 0, 2, 4, 6 | 1, 3, 5, 7
    a0, a2, a4, a6 = _unstack4(e, L2)
    a1, a3, a5, a7 = _unstack4(o, L2)
    return a0, a1, a2, a3, a4, a5, a6, a7


@gluon.jit
def _tiles(x, MT: gl.constexpr, L2: gl.constexpr):
    """The ``MT`` row tiles of ``x`` ``[8, 4, MT]`` as four ``[8, 4]`` (the first repeated
    where ``MT`` < 4)."""
    if MT == 1:
        a = _last(x, L2)
        return a, a, a, a
    elif MT == 2:
        a, b = _unstack2(x, L2)
        return a, b, a, a
    else:
        return _unstack4(x, L2)


@gluon.jit
def _words8(x, L3: gl.constexpr):
    """``[8, 4, MT, 8]`` words -> eight ``[8, 4, MT]`` in ``L3``."""
    shape: gl.constexpr = x.shape
    e, o = gl.split(gl.reshape(x, [shape[0], shape[1], shape[2], 4, 2]))
    e0, e1 = gl.split(gl.reshape(e, [shape[0], shape[1], shape[2], 2, 2]))
    o0, o1 = gl.split(gl.reshape(o, [shape[0], shape[1], shape[2], 2, 2]))
    # e0: 0, 4; e1: 2, 6; o0: 1, 5; o1: 3, 7
    w0, w4 = gl.split(e0)
    w2, w6 = gl.split(e1)
    w1, w5 = gl.split(o0)
    w3, w7 = gl.split(o1)
    return (
        gl.convert_layout(w0, L3, assert_trivial=True),
        gl.convert_layout(w1, L3, assert_trivial=True),
        gl.convert_layout(w2, L3, assert_trivial=True),
        gl.convert_layout(w3, L3, assert_trivial=True),
        gl.convert_layout(w4, L3, assert_trivial=True),
        gl.convert_layout(w5, L3, assert_trivial=True),
        gl.convert_layout(w6, L3, assert_trivial=True),
        gl.convert_layout(w7, L3, assert_trivial=True),
    )


@gluon.jit
def _words4(x, L3: gl.constexpr):
    """``[8, 4, MT, 4]`` words -> four ``[8, 4, MT]`` in ``L3``."""
    shape: gl.constexpr = x.shape
    e, o = gl.split(gl.reshape(x, [shape[0], shape[1], shape[2], 2, 2]))  # 0, 2 | 1, 3
    w0, w2 = gl.split(e)
    w1, w3 = gl.split(o)
    return (
        gl.convert_layout(w0, L3, assert_trivial=True),
        gl.convert_layout(w1, L3, assert_trivial=True),
        gl.convert_layout(w2, L3, assert_trivial=True),
        gl.convert_layout(w3, L3, assert_trivial=True),
    )


@gluon.jit
def _pair_t(w0, w1):
    """fp16 pairs of columns ``2 c, 2 c + 1`` transposed by quarter (``token_rows_ptx``)."""
    return gl.inline_asm_elementwise(_PAIR_T, _PAIR_T_C, [w0, w1], dtype=gl.uint32, is_pure=True, pack=1)


@gluon.jit
def _bits48(p, mask):
    """The 48 bits at ``p`` (three half-words, 2-byte aligned) as int32 bits 0-31 and 32-47."""
    h0 = gl.load(p, mask=mask, other=0).to(gl.int32) & 0xFFFF
    h1 = gl.load(p + 1, mask=mask, other=0).to(gl.int32) & 0xFFFF
    h2 = gl.load(p + 2, mask=mask, other=0).to(gl.int32) & 0xFFFF
    return h0 | (h1 << 16), h2


@gluon.jit
def _load_tile(
    start,
    where,
    LT: gl.constexpr,
    LT4: gl.constexpr,
    MT: gl.constexpr,
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
    """The tile at ``start``: its key words of rows ``g`` and ``g + 8`` of each row tile
    (3-bit codes: the chunk's three words each, ``[8, 4, MT]``; fp8 or 4-bit codes: the
    chunk's eight or four words, ``[8, 4, MT, 8 or 4]``, in the first slot), their norms,
    value scales and zero points ``[8, 1, MT]``, and the value words ``2 g, 2 g + 1`` of
    tokens ``2 c, 2 c + 1, 2 c + 8, 2 c + 9`` ``[8, 4, MT]`` (3-bit values: those positions'
    bits 0-31 and 32-47; calibrated formats' 3-bit codes: spread to the nibbles of two words,
    as 4-bit ones; no zero points, ``vz`` is ``vs``). Nothing is read from ``hi`` on; a block
    id outside ``[0, num_blocks)`` is read as the last block (``gluon_kernel.load_blocks``)."""
    _, _, head_base, stride_blk, hi, _ = where
    TL: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, LT))
    gi = gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, LT)))[:, None, None]
    ci = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, LT)))[None, :, None]
    ti = gl.arange(0, MT, layout=TL)[None, None, :]
    mpos = start + ti * 16  # [1, 1, MT]: each row tile's first position
    # one block id per 16-token row tile (it lies in one block)
    blk = load_blocks(start, where, TL, MT, 16, BLOCK_SIZE)[None, None, :]
    base = head_base + blk.to(gl.int64) * stride_blk
    first = mpos % BLOCK_SIZE
    left = hi - mpos  # positions of the row tile still before hi

    # key rows g (h = 0) and g + 8 (h = 1)
    kmask0 = gi + ci * 0 < left
    kmask1 = gi + 8 + ci * 0 < left
    krow0 = base + KEY_OFF + (first + gi).to(gl.int64) * KEY_BYTES
    krow1 = base + KEY_OFF + (first + gi + 8).to(gl.int64) * KEY_BYTES
    if KEY_FP8 or KBITS == 4:
        # a chunk's 8 (fp8) or 4 (4-bit codes) words
        KW: gl.constexpr = 8 if KEY_FP8 else 4
        wi = gl.arange(0, KW, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, LT4))))
        w4 = wi[None, None, None, :]
        k0 = gl.load(
            gl.convert_layout(krow0 + ci * (4 * KW), gl.SliceLayout(3, LT4)).to(gl.pointer_type(gl.int32))[
                :, :, :, None
            ]
            + w4,
            mask=gl.convert_layout(kmask0, gl.SliceLayout(3, LT4))[:, :, :, None],
            other=0,
        )
        k3 = gl.load(
            gl.convert_layout(krow1 + ci * (4 * KW), gl.SliceLayout(3, LT4)).to(gl.pointer_type(gl.int32))[
                :, :, :, None
            ]
            + w4,
            mask=gl.convert_layout(kmask1, gl.SliceLayout(3, LT4))[:, :, :, None],
            other=0,
        )
        k1 = k0
        k2 = k0
        k4 = k3
        k5 = k3
    else:
        p0 = (krow0 + ci * 12).to(gl.pointer_type(gl.int32))
        p1 = (krow1 + ci * 12).to(gl.pointer_type(gl.int32))
        k0 = gl.load(p0, mask=kmask0, other=0)
        k1 = gl.load(p0 + 1, mask=kmask0, other=0)
        k2 = gl.load(p0 + 2, mask=kmask0, other=0)
        k3 = gl.load(p1, mask=kmask1, other=0)
        k4 = gl.load(p1 + 1, mask=kmask1, other=0)
        k5 = gl.load(p1 + 2, mask=kmask1, other=0)
    # per key row: norm, value scale and zero point (the same for the row's 4 lanes)
    m0 = gi < left
    m1 = gi + 8 < left
    f0 = (base + (first + gi).to(gl.int64) * 2).to(gl.pointer_type(gl.float16))
    f1 = (base + (first + gi + 8).to(gl.int64) * 2).to(gl.pointer_type(gl.float16))
    vs0 = gl.load(f0 + SCALE_OFF // 2, mask=m0, other=0.0)
    vs1 = gl.load(f1 + SCALE_OFF // 2, mask=m1, other=0.0)
    if CALIBRATED:
        vz0 = vs0
        vz1 = vs1
    else:
        vz0 = gl.load(f0 + ZERO_OFF // 2, mask=m0, other=0.0)
        vz1 = gl.load(f1 + ZERO_OFF // 2, mask=m1, other=0.0)
    if KEY_FP8:
        kn0 = vs0
        kn1 = vs1
    else:
        kn0 = gl.load(f0 + NORM_OFF // 2, mask=m0, other=0.0)
        kn1 = gl.load(f1 + NORM_OFF // 2, mask=m1, other=0.0)
    # tokens 2 c, 2 c + 1, 2 c + 8, 2 c + 9; 4-bit values: words 2 g, 2 g + 1 of each
    # (head_dim 16 g .. 16 g + 15); 3-bit values: the same positions' 48 bits, read as the
    # half-words 3 g .. 3 g + 2 and kept as bits 0-31 and 32-47
    vt = 2 * ci + gi * 0
    ma = vt < left
    mb = vt + 1 < left
    mc = vt + 8 < left
    md = vt + 9 < left
    if VBITS == 3:
        vbase = base + VAL_OFF + gi * 6
        va = (vbase + (first + vt).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int16))
        vb = (vbase + (first + vt + 1).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int16))
        vc = (vbase + (first + vt + 8).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int16))
        vd = (vbase + (first + vt + 9).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int16))
        v0, v1 = _bits48(va, ma)
        v2, v3 = _bits48(vb, mb)
        v4, v5 = _bits48(vc, mc)
        v6, v7 = _bits48(vd, md)
        if CALIBRATED:
            # Lloyd-Max codes are looked up by nibble: codes 0-7 and 8-15 of the 16 in two words
            v0, v1 = _nibbles(v0), _nibbles(((v0 >> 24) & 0xFF) | (v1 << 8))
            v2, v3 = _nibbles(v2), _nibbles(((v2 >> 24) & 0xFF) | (v3 << 8))
            v4, v5 = _nibbles(v4), _nibbles(((v4 >> 24) & 0xFF) | (v5 << 8))
            v6, v7 = _nibbles(v6), _nibbles(((v6 >> 24) & 0xFF) | (v7 << 8))
    else:
        vbase = base + VAL_OFF + gi * 8
        va = (vbase + (first + vt).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int32))
        vb = (vbase + (first + vt + 1).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int32))
        vc = (vbase + (first + vt + 8).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int32))
        vd = (vbase + (first + vt + 9).to(gl.int64) * VAL_BYTES).to(gl.pointer_type(gl.int32))
        v0 = gl.load(va, mask=ma, other=0)
        v1 = gl.load(va + 1, mask=ma, other=0)
        v2 = gl.load(vb, mask=mb, other=0)
        v3 = gl.load(vb + 1, mask=mb, other=0)
        v4 = gl.load(vc, mask=mc, other=0)
        v5 = gl.load(vc + 1, mask=mc, other=0)
        v6 = gl.load(vd, mask=md, other=0)
        v7 = gl.load(vd + 1, mask=md, other=0)
    return (k0, k1, k2, k3, k4, k5, kn0, kn1, vs0, vs1, vz0, vz1, v0, v1, v2, v3, v4, v5, v6, v7)


@gluon.jit
def _row_tile(a, b, c, d, t: gl.constexpr, LU: gl.constexpr):
    """Row tile ``t`` of four per-token tensors (:func:`_tiles`' tuples) as ``[8, 4, 1]`` in
    the value product's layout."""
    return (
        gl.convert_layout(a[t], gl.SliceLayout(2, LU), assert_trivial=True)[:, :, None],
        gl.convert_layout(b[t], gl.SliceLayout(2, LU), assert_trivial=True)[:, :, None],
        gl.convert_layout(c[t], gl.SliceLayout(2, LU), assert_trivial=True)[:, :, None],
        gl.convert_layout(d[t], gl.SliceLayout(2, LU), assert_trivial=True)[:, :, None],
    )


@gluon.jit
def _value_words(v_lo, v_hi, lo_u):
    """The four value words of the value product's row tiles (``lo_u``: word ``2 g``, else
    ``2 g + 1``)."""
    return (
        gl.where(lo_u, v_lo[0], v_hi[0]),
        gl.where(lo_u, v_lo[1], v_hi[1]),
        gl.where(lo_u, v_lo[2], v_hi[2]),
        gl.where(lo_u, v_lo[3], v_hi[3]),
    )


@gluon.jit
def _pv_step(acc, acc_b, ops, z, b0, b1, c0, c1, TEXT: gl.constexpr, CONSTRAINTS: gl.constexpr, NCT: gl.constexpr):
    """``acc`` (four ``[8, 4, 8]`` C registers, one per row tile ``u``) plus one row tile's 16
    tokens times their values, and with two column tiles (``NCT``) ``acc_b`` too; returns both
    (``acc_b`` unchanged with one). ``TEXT`` is ``token_rows_ptx.pv4_ptx`` or ``pv3_ptx`` of
    ``NCT`` tiles, ``ops`` the value operands it takes first (``[8, 4, 8]``), ``b0``, ``b1``
    the first column tile's probabilities as ``B`` registers ``[8, 4]``, ``c0``, ``c1`` the
    second's, ``z`` zeros ``[1, 1, 8]`` that broadcast them over the row tiles. Each value
    word is decoded once for both tiles. (The jit has no starred arguments: the operand
    tuples are concatenated.)"""
    if NCT == 1:
        out = gl.inline_asm_elementwise(
            TEXT,
            CONSTRAINTS,
            ops + (z + b0[:, :, None], z + b1[:, :, None]) + acc,  # noqa: RUF005
            dtype=(gl.float32,) * 4,
            is_pure=True,
            pack=1,
        )
        return (out[0], out[1], out[2], out[3]), acc_b
    else:
        out = gl.inline_asm_elementwise(
            TEXT,
            CONSTRAINTS,
            ops + (z + b0[:, :, None], z + b1[:, :, None], z + c0[:, :, None], z + c1[:, :, None]) + acc + acc_b,  # noqa: RUF005
            dtype=(gl.float32,) * 8,
            is_pure=True,
            pack=1,
        )
        return (out[0], out[1], out[2], out[3]), (out[4], out[5], out[6], out[7])


@gluon.jit
def _query_columns(
    query,
    key_cal,
    col0,
    ci2,
    G: gl.constexpr,
    G_PAD: gl.constexpr,
    D: gl.constexpr,
    LOG2_D: gl.constexpr,
    KEY_FP8: gl.constexpr,
    SATURATE_QUERY: gl.constexpr,
    CALIBRATED: gl.constexpr,
    L2: gl.constexpr,
    L16: gl.constexpr,
    LU: gl.constexpr,
):
    """The ``B`` registers of query columns ``col0 .. col0 + 7`` of the chunk at ``qc`` (column
    ``n``: query token ``qc + n // G_PAD``, head ``n % G_PAD`` of the group; ``query``: ``(Q,
    q_start, qc, q_len, h, stride_qt, stride_qh, q_mul)``), rotated and scaled
    as the keys were stored, sixteen ``[8, 4, 1]`` (thread ``(g, c)``: column ``col0 + g``,
    pairs ``32 c + 2 e``), whether columns ``col0 + 2 c`` and ``+ 1`` hold a NaN or ±inf, and
    their position-0 score terms (calibrated formats, ``kernel.py``'s: ``(q * q_mul) . (mu0 -
    mu)``, the query then divided by the key gain before its rotation; ``key_cal``: the key
    gain, offset and first-position offset; 0 for the other formats), ``[8, 4]`` each."""
    # the query's Hadamard transform (gluon_kernel's layouts, one warp)
    QH: gl.constexpr = gl.BlockedLayout([1, D // 2], [16, 2], [1, 1], [1, 0])
    QE: gl.constexpr = gl.BlockedLayout([1, 1], [16, 2], [1, 1], [1, 0])
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (D // 8), D // 8], [1, 1], [1, 0])
    QC: gl.constexpr = gl.BlockedLayout([1, 1, 32], [8, 4, 1], [1, 1, 1], [2, 1, 0])
    QLOAD: gl.constexpr = QL if KEY_FP8 else QH
    Q, q_start, qc, q_len, h, stride_qt, stride_qh, q_mul = query
    mq = col0 + gl.arange(0, 8, layout=gl.SliceLayout(1, QLOAD))
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
    q_bad_rows = _nonfinite_rows(q)
    fb0 = gl.zeros([8, 4], gl.float32, L2)
    fb1 = fb0
    if KEY_FP8:
        q = q * q_mul
    elif CALIBRATED:
        KeyGain, KeyOffset, KeyFirstOffset = key_cal
        ch = h.to(gl.int64) * D + dq
        shift = gl.load(KeyFirstOffset + ch) - gl.load(KeyOffset + ch)
        fb = gl.sum(q * q_mul * shift[None, :], axis=1)  # column col0 + n's
        # each thread's columns 2 c and 2 c + 1: the 8 terms in every thread, one picked
        n8 = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, LU)))[None, None, :]
        c3 = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, LU)))[None, :, None]
        fb8 = gl.convert_layout(fb, gl.SliceLayout(0, gl.SliceLayout(1, LU)))[None, None, :]
        z = gl.zeros([8, 4], gl.float32, gl.SliceLayout(2, LU))
        fb0 = gl.convert_layout(z + gl.sum(gl.where(n8 == 2 * c3, fb8, 0.0), axis=2), L2, assert_trivial=True)
        fb1 = gl.convert_layout(z + gl.sum(gl.where(n8 == 2 * c3 + 1, fb8, 0.0), axis=2), L2, assert_trivial=True)
        q = q * ((q_mul / gl.sqrt(D * 1.0)) / gl.load(KeyGain + ch))[None, :]
        q = _butterflies(q, 8, D, 0, LOG2_D - 1)
        q = _butterflies(gl.convert_layout(q, QE), 8, D, LOG2_D - 1, LOG2_D)
    else:
        q = q * (q_mul / gl.sqrt(D * 1.0))
        q = _butterflies(q, 8, D, 0, LOG2_D - 1)
        q = _butterflies(gl.convert_layout(q, QE), 8, D, LOG2_D - 1, LOG2_D)
    # rows g, chunks c of 32 positions: [8, 4, 32]
    q = gl.convert_layout(gl.reshape(q, [8, 4, 32]), QC)
    # a column's query with a NaN or ±inf element (flags of rows g as fp16 pairs (g, g),
    # transposed by quarter: each thread gets those of columns 2 c, 2 c + 1)
    bad = gl.convert_layout(q_bad_rows.to(gl.float32), gl.SliceLayout(1, L2))[:, None] + ci2 * 0.0
    bad_t = _pair_t(bad, bad)
    q_bad0 = (bad_t & 0xFFFF) != 0
    q_bad1 = (bad_t >> 16) != 0
    if SATURATE_QUERY:
        q = _saturate(q)
    q16 = q.to(gl.float16, fp_downcast_rounding="rtz")
    qlo, qhi = gl.split(gl.reshape(q16, [8, 4, 16, 2]))
    qw = qlo.to(gl.uint16, bitcast=True).to(gl.uint32) | (qhi.to(gl.uint16, bitcast=True).to(gl.uint32) << 16)
    qw = gl.convert_layout(qw, L16)
    qa, qb = _split2(qw)  # even / odd pairs: [8, 4, 8] each
    q0, q2, q4, q6, q8, q10, q12, q14 = _unstack8(qa, L2)
    q1, q3, q5, q7, q9, q11, q13, q15 = _unstack8(qb, L2)
    # as [8, 4, 1], broadcast over the row tiles
    regs = (
        q0[:, :, None],
        q1[:, :, None],
        q2[:, :, None],
        q3[:, :, None],
        q4[:, :, None],
        q5[:, :, None],
        q6[:, :, None],
        q7[:, :, None],
        q8[:, :, None],
        q9[:, :, None],
        q10[:, :, None],
        q11[:, :, None],
        q12[:, :, None],
        q13[:, :, None],
        q14[:, :, None],
        q15[:, :, None],
    )
    return regs, q_bad0, q_bad1, fb0, fb1


@gluon.jit
def _masked(s00, s01, s10, s11, pos0, pos1, hi, cols):
    """A column tile's scores, -inf at positions from ``hi`` on, past a column's causal bound
    or in a column not in use (``cols``: columns ``2 c``, ``2 c + 1``' last positions and
    whether they are in use)."""
    row_pos0, row_pos1, ok0, ok1 = cols
    s00 = gl.where((pos0 < hi) & (pos0 <= row_pos0[:, :, None]) & ok0[:, :, None], s00, float("-inf"))
    s01 = gl.where((pos0 < hi) & (pos0 <= row_pos1[:, :, None]) & ok1[:, :, None], s01, float("-inf"))
    s10 = gl.where((pos1 < hi) & (pos1 <= row_pos0[:, :, None]) & ok0[:, :, None], s10, float("-inf"))
    s11 = gl.where((pos1 < hi) & (pos1 <= row_pos1[:, :, None]) & ok1[:, :, None], s11, float("-inf"))
    return s00, s01, s10, s11


@gluon.jit
def _softmax_columns(s00, s01, s10, s11, state, acc, q_scale, values, LU: gl.constexpr):
    """``online_softmax``'s tile step for one column tile (a column's 8 lanes hold its
    tokens): the new ``state`` (maximum, sum and centred-value sum of columns ``2 c``, ``2 c +
    1``), ``acc`` rescaled, and the probabilities times the value scales as the value
    product's two ``B`` registers. ``values``: the tile's value-scale factors and centres and
    the scale reference's ratio (shared by the column tiles)."""
    m_0, m_1, l_0, l_1, r_0, r_1 = state
    w0, w1, mid0, mid1, fr = values
    t_0 = gl.max(gl.max(gl.maximum(s00, s10), axis=2), axis=0)[None, :] * q_scale
    t_1 = gl.max(gl.max(gl.maximum(s01, s11), axis=2), axis=0)[None, :] * q_scale
    mn_0 = gl.where(t_0 > m_0 + 8.0, t_0, m_0)
    mn_1 = gl.where(t_1 > m_1 + 8.0, t_1, m_1)
    mr_0 = gl.where(mn_0 == float("-inf"), 0.0, mn_0)
    mr_1 = gl.where(mn_1 == float("-inf"), 0.0, mn_1)
    al_0 = gl.where(mn_0 == m_0, 1.0, gl.exp2(m_0 - mr_0))
    al_1 = gl.where(mn_1 == m_1, 1.0, gl.exp2(m_1 - mr_1))
    p00 = gl.exp2(s00 * q_scale - mr_0[:, :, None])
    p01 = gl.exp2(s01 * q_scale - mr_1[:, :, None])
    p10 = gl.exp2(s10 * q_scale - mr_0[:, :, None])
    p11 = gl.exp2(s11 * q_scale - mr_1[:, :, None])
    l_0 = l_0 * al_0 + gl.sum(p00 + p10, axis=2)
    l_1 = l_1 * al_1 + gl.sum(p01 + p11, axis=2)
    r_0 = r_0 * al_0 + gl.sum(p00 * mid0 + p10 * mid1, axis=2)
    r_1 = r_1 * al_1 + gl.sum(p01 * mid0 + p11 * mid1, axis=2)
    bt0 = _pair_t(p00 * w0, p01 * w0)  # tokens 2 c, 2 c + 1 of column g
    bt1 = _pair_t(p10 * w1, p11 * w1)  # tokens 2 c + 8, 2 c + 9
    fa0 = gl.convert_layout(al_0 * fr, gl.SliceLayout(2, LU), assert_trivial=True)[:, :, None]
    fa1 = gl.convert_layout(al_1 * fr, gl.SliceLayout(2, LU), assert_trivial=True)[:, :, None]
    acc = (acc[0] * fa0, acc[1] * fa1, acc[2] * fa0, acc[3] * fa1)
    return (mn_0, mn_1, l_0, l_1, r_0, r_1), acc, bt0, bt1


@gluon.jit
def _store_rotated(
    o_0,
    o_1,
    b_0,
    b_1,
    seen_0,
    seen_1,
    dest,
    calib,
    G: gl.constexpr,
    G_PAD: gl.constexpr,
    NUM_Q_HEADS: gl.constexpr,
    NUM_SPLITS: gl.constexpr,
    D: gl.constexpr,
    LOG2_D: gl.constexpr,
):
    """A calibrated format's column tile leaves as ``kernel.py``'s does: ``o_0``, ``o_1``
    (columns ``2 c``, ``2 c + 1``; ``[8, 4, 16]``, head_dim ``16 g + e``, already times ``a``)
    rotated back (the orthonormal Hadamard transform of each column's 128 positions, in the
    query's layouts), divided by the value gain, plus ``nu + b (nu0 - nu)`` (``b_0``, ``b_1``:
    each column's probability of position 0; ``nu`` times ``seen_0``, ``seen_1``: 1.0 where
    the column saw a key, 0.0 where it saw none and is written as 0), stored as output or
    partial rows. ``calib``: ``(ValueGain, ValueOffset, ValueFirstOffset, col0, qc, q_len)``,
    the tile's first column and the chunk's query tokens."""
    QH: gl.constexpr = gl.BlockedLayout([1, D // 2], [16, 2], [1, 1], [1, 0])
    QE: gl.constexpr = gl.BlockedLayout([1, 1], [16, 2], [1, 1], [1, 0])
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (D // 8), D // 8], [1, 1], [1, 0])
    Out, Partial, _, q_start, h, split, stride_ot, stride_oh, _, _ = dest
    ValueGain, ValueOffset, ValueFirstOffset, col0, qc, q_len = calib
    # [8 (g), 4 (c), 16 (e), 2 (j)] -> [8 columns (2 c + j), 128 positions (16 g + e)]
    o = gl.reshape(gl.permute(gl.join(o_0, o_1), (1, 3, 0, 2)), [8, D]) * (1.0 / gl.sqrt(D * 1.0))
    o = _butterflies(gl.convert_layout(o, QH), 8, D, 0, LOG2_D - 1)
    o = _butterflies(gl.convert_layout(o, QE), 8, D, LOG2_D - 1, LOG2_D)
    o = gl.convert_layout(o, QL)
    # each column's b: the same in a column's 8 lanes
    b = gl.reshape(gl.max(gl.join(b_0, b_1), axis=0), [8])
    b = gl.convert_layout(b, gl.SliceLayout(1, QL))
    seen = gl.reshape(gl.max(gl.join(seen_0, seen_1), axis=0), [8])
    seen = gl.convert_layout(seen, gl.SliceLayout(1, QL))
    dc = gl.arange(0, D, layout=gl.SliceLayout(0, QL))
    ch = h.to(gl.int64) * D + dc
    nu = gl.load(ValueOffset + ch)
    nu_first_shift = gl.load(ValueFirstOffset + ch) - nu
    inv_gain = 1.0 / gl.load(ValueGain + ch)
    o = o * inv_gain[None, :] + seen[:, None] * nu[None, :] + b[:, None] * nu_first_shift[None, :]
    n = col0 + gl.arange(0, 8, layout=gl.SliceLayout(1, QL))
    tok = qc + n // G_PAD
    ok = (tok < q_len) & (n % G_PAD < G)
    q_row = (q_start + tok).to(gl.int64)
    head = h * G + n % G_PAD
    if NUM_SPLITS == 1:
        gl.store(
            Out + q_row[:, None] * stride_ot + head[:, None] * stride_oh + dc[None, :],
            o.to(Out.dtype.element_ty),
            mask=ok[:, None],
        )
    else:
        slot = (q_row * NUM_Q_HEADS + head) * NUM_SPLITS + split
        gl.store(Partial + slot[:, None] * D + dc[None, :], o, mask=ok[:, None])


@gluon.jit
def _store_columns(
    dest,
    acc,
    state,
    f_i,
    q_bad0,
    q_bad1,
    cols,
    calib,
    G: gl.constexpr,
    G_PAD: gl.constexpr,
    NUM_Q_HEADS: gl.constexpr,
    NUM_SPLITS: gl.constexpr,
    D: gl.constexpr,
    LOG2_D: gl.constexpr,
    SKIP_EMPTY: gl.constexpr,
    CALIBRATED: gl.constexpr,
    L16: gl.constexpr,
):
    """One column tile's output rows (or, with kv splits, its partial rows and their
    log-sum-exps). ``cols``: columns ``2 c``, ``2 c + 1`` of the tile (index, query token,
    whether in use); ``dest``: ``(Out, Partial, Lse, q_start, h, split, stride_ot, stride_oh,
    dpos, gi2)``; ``calib``: :func:`_store_rotated`'s, for calibrated formats."""
    Out, Partial, Lse, q_start, h, split, stride_ot, stride_oh, dpos, gi2 = dest
    m_0, m_1, l_0, l_1, r_0, r_1 = state
    n0, n1, tok0, tok1, ok0, ok1 = cols
    # each column's sums over its 8 lanes
    lt_0 = gl.sum(l_0, axis=0)[None, :] + gi2 * 0.0
    lt_1 = gl.sum(l_1, axis=0)[None, :] + gi2 * 0.0
    rt_0 = gl.sum(r_0, axis=0)[None, :] + gi2 * 0.0
    rt_1 = gl.sum(r_1, axis=0)[None, :] + gi2 * 0.0
    fa_0, fb_0 = _output_factors(lt_0, rt_0, f_i, q_bad0)
    fa_1, fb_1 = _output_factors(lt_1, rt_1, f_i, q_bad1)
    # column j's 16 head_dim positions: element 2 u + (row g + 8)
    o_0 = gl.reshape(gl.join(acc[0], acc[2]), [8, 4, 16])
    o_1 = gl.reshape(gl.join(acc[1], acc[3]), [8, 4, 16])
    o_0 = gl.convert_layout(o_0, L16) * gl.convert_layout(fa_0, gl.SliceLayout(2, L16))[:, :, None]
    o_1 = gl.convert_layout(o_1, L16) * gl.convert_layout(fa_1, gl.SliceLayout(2, L16))[:, :, None]
    if CALIBRATED:
        seen_0, seen_1 = (lt_0 > 0).to(gl.float32), (lt_1 > 0).to(gl.float32)
        _store_rotated(o_0, o_1, fb_0, fb_1, seen_0, seen_1, dest, calib, G, G_PAD, NUM_Q_HEADS, NUM_SPLITS, D, LOG2_D)
    else:
        o_0 = o_0 + gl.convert_layout(fb_0, gl.SliceLayout(2, L16))[:, :, None]
        o_1 = o_1 + gl.convert_layout(fb_1, gl.SliceLayout(2, L16))[:, :, None]
    for jj in gl.static_range(2):
        o_j = o_1 if jj == 1 else o_0
        tok_j = tok1 if jj == 1 else tok0
        ok_j = ok1 if jj == 1 else ok0
        n_j = n1 if jj == 1 else n0
        q_row = (q_start + tok_j).to(gl.int64)
        head = h * G + n_j % G_PAD
        q_row_o = gl.convert_layout(q_row, gl.SliceLayout(2, L16))[:, :, None]
        head_o = gl.convert_layout(head, gl.SliceLayout(2, L16))[:, :, None]
        ok_o = gl.convert_layout(ok_j, gl.SliceLayout(2, L16))[:, :, None]
        if NUM_SPLITS == 1:
            if not CALIBRATED:
                gl.store(
                    Out + q_row_o * stride_ot + head_o * stride_oh + dpos,
                    o_j.to(Out.dtype.element_ty),
                    mask=ok_o & (dpos < D),
                )
        else:
            if not CALIBRATED:
                slot_o = (q_row_o * NUM_Q_HEADS + head_o) * NUM_SPLITS + split
                gl.store(Partial + slot_o * D + dpos, o_j, mask=ok_o & (dpos < D))
            m_j = m_1 if jj == 1 else m_0
            lt_j = lt_1 if jj == 1 else lt_0
            bad_j = q_bad1 if jj == 1 else q_bad0
            slot = (q_row * NUM_Q_HEADS + head) * NUM_SPLITS + split
            gl.store(Lse + slot, _row_lse(m_j, lt_j, bad_j, SKIP_EMPTY), mask=ok_j & (gi2 == 0))


@gluon.jit
def token_rows_attention_kernel(
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
    BALANCE: gl.constexpr = False,
    SKIP_EMPTY: gl.constexpr = False,
    CALIBRATED: gl.constexpr = False,
    INT_VALUES: gl.constexpr = False,
):
    """One warp; ``BLOCK_Q * G_PAD`` is 8 or 16 (the product's columns: one or two column
    tiles of 8, each key and value decoded once for both), ``D`` 128, ``BLOCK_KV`` 16, 32 or
    64, ``BLOCK_SIZE`` a power of two >= 16 (a row tile never straddles a block). Keys fp8
    (``KEY_FP8``) or 3- or 4-bit codebook codes (``KBITS``; ``Centroids``:
    ``key_lut.lut_words``' table, of the magnitudes for 4-bit codes), values uniform 4-bit
    codes, or 3-bit codes with codebook keys (``VBITS``). ``CALIBRATED``: tq's calibrated
    formats with 4-bit keys (tq_k4v3's 3-bit Lloyd-Max values looked up in ``VCentroids``,
    the value codebook's register table; the calibration pointers as the Gluon kernel takes
    them). ``NORM_CORRECTION``: codebook keys' sums of squared centroids by a product of the
    squared key operands with ones on the matrix unit (the formats that fold the norm need no
    sums). ``INT_VALUES`` (tq_k4v4, the only calibrated format with 4-bit
    values): its symmetric values from their codes' bits, ``(code - 7.5) / 8``
    (``token_rows_ptx.pv4_ptx``'s symmetric step, the 1/8 in the value scales). The other
    constexprs are
    ``kernel.attention_kernel``'s."""
    gl.static_assert(D == 128, "head_dim 128")
    gl.static_assert(VBITS == 4 or (VBITS == 3 and not KEY_FP8), "values: 4 bits, or 3 with codebook keys")
    gl.static_assert(BLOCK_Q * G_PAD == 8 or BLOCK_Q * G_PAD == 16, "8 or 16 query columns")
    gl.static_assert(not INT_VALUES or (CALIBRATED and VBITS == 4), "int values: tq_k4v4's symmetric values")
    gl.static_assert(not CALIBRATED or VBITS == 3 or INT_VALUES, "calibrated 4-bit values: symmetric, from their bits")
    NCT: gl.constexpr = BLOCK_Q * G_PAD // 8
    # the 3-bit keys' score steps (the chunk's two halves; 2: with two column tiles)
    QK3_LO: gl.constexpr = _QK3_LO_N if NORM_CORRECTION else _QK3_LO
    QK3_HI: gl.constexpr = _QK3_HI_N if NORM_CORRECTION else _QK3_HI
    QK3_LO2: gl.constexpr = _QK3_LO2_N if NORM_CORRECTION else _QK3_LO2
    QK3_HI2: gl.constexpr = _QK3_HI2_N if NORM_CORRECTION else _QK3_HI2
    # the 4-bit value step: uniform values, or tq_k4v4's symmetric ones (INT_VALUES)
    PV4_STEP: gl.constexpr = (_PV4S if NCT == 1 else _PV4S_2) if INT_VALUES else (_PV4 if NCT == 1 else _PV4_2)
    MT: gl.constexpr = BLOCK_KV // 16
    # [8 (g), 4 (c), n]: lane 4 g + c, n in registers
    LT: gl.constexpr = gl.BlockedLayout([1, 1, MT], [8, 4, 1], [1, 1, 1], [2, 1, 0])
    LT4: gl.constexpr = gl.BlockedLayout([1, 1, MT, 8 if KEY_FP8 else 4], [8, 4, 1, 1], [1, 1, 1, 1], [3, 2, 1, 0])
    LU: gl.constexpr = gl.BlockedLayout([1, 1, 8], [8, 4, 1], [1, 1, 1], [2, 1, 0])
    # [8, 4, 16]: the query's 16 fp16 pairs of a chunk, and a column's 16 output positions
    L16: gl.constexpr = gl.BlockedLayout([1, 1, 16], [8, 4, 1], [1, 1, 1], [2, 1, 0])
    L2: gl.constexpr = gl.SliceLayout(2, LT)

    r = gl.program_id(0)
    h = gl.program_id(1)
    split = gl.program_id(2)
    chunk = 0
    if BALANCE:
        chunk = _balanced_chunk(SeqLens, stride_sl, bt_cap, split_programs, NUM_SPLITS, BLOCK_KV, 1)
    seq_len, q_start, q_len, kv_lo, kv_hi = _request_bounds(
        SeqLens, QueryStart, stride_sl, stride_qs, bt_cap, num_query_rows, chunk, NUM_SPLITS, BLOCK_KV, BALANCE
    )
    head_base = Cache + h.to(gl.int64) * HEAD_STRIDE
    bt_row = BlockTable + r.to(gl.int64) * stride_bt
    if KEY_FP8:
        lut = (0, 0, 0, 0)
    else:
        lut = register_table(Centroids)
    if CALIBRATED and not INT_VALUES:
        vlut = register_table(VCentroids)
    else:
        vlut = (0, 0, 0, 0)

    # per thread: query columns 2 c + j (j = 0, 1) of the first column tile, 8 + 2 c + j of
    # the second
    gi2 = gl.arange(0, 8, layout=gl.SliceLayout(1, L2))[:, None]
    ci2 = gl.arange(0, 4, layout=gl.SliceLayout(0, L2))[None, :]
    n0 = 2 * ci2 + gi2 * 0
    n1 = n0 + 1
    # the value product's row tiles u: word 2 g + u // 4, byte u % 4 (token_rows_ptx)
    uu = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, LU)))[None, None, :]
    lo_u = uu < 4
    sel_u = ((uu % 4) | (((uu % 4) + 4) << 8)).to(gl.uint32)
    # 3-bit values: row tile u's codes at bits 6 u .. 6 u + 5 of a thread's 48
    shift_u = (uu * 6).to(gl.uint32)
    # Lloyd-Max values: the row tile's byte of two words into bytes 0 and 1 (token_rows_ptx.pvl_ptx)
    selm_u = ((uu % 4) | (((uu % 4) + 4) << 4)).to(gl.uint32)
    # the output's head_dim positions of a thread: 16 g .. 16 g + 15 (element 2 u + high nibble)
    go = gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, L16)))[:, None, None]
    eo = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, L16)))[None, None, :]
    dpos = go * 16 + eo

    for qc in range(0, q_len, BLOCK_Q):
        tok0 = qc + n0 // G_PAD
        tok1 = qc + n1 // G_PAD
        ok0 = (tok0 < q_len) & (n0 % G_PAD < G)
        ok1 = (tok1 < q_len) & (n1 % G_PAD < G)
        if NCT == 2:
            tok8 = qc + (n0 + 8) // G_PAD
            tok9 = qc + (n1 + 8) // G_PAD
            ok8 = (tok8 < q_len) & ((n0 + 8) % G_PAD < G)
            ok9 = (tok9 < q_len) & ((n1 + 8) % G_PAD < G)
        if SKIP_EMPTY and kv_lo >= gl.minimum(kv_hi, seq_len - q_len + gl.minimum(qc + BLOCK_Q, q_len)):
            first_g = gi2 == 0
            for jj in gl.static_range(2 * NCT):
                tok_e = tok0
                ok_e = ok0
                n_e = n0
                if jj == 1:
                    tok_e = tok1
                    ok_e = ok1
                    n_e = n1
                elif jj == 2:
                    tok_e = tok8
                    ok_e = ok8
                    n_e = n0 + 8
                elif jj == 3:
                    tok_e = tok9
                    ok_e = ok9
                    n_e = n1 + 8
                slot_e = ((q_start + tok_e).to(gl.int64) * NUM_Q_HEADS + h * G + n_e % G_PAD) * NUM_SPLITS + split
                gl.store(Lse + slot_e, gl.full([8, 4], float("-inf"), gl.float32, L2), mask=ok_e & first_g)
        else:
            query = (Q, q_start, qc, q_len, h, stride_qt, stride_qh, q_mul)
            key_cal = (KeyGain, KeyOffset, KeyFirstOffset)
            qr, q_bad0, q_bad1, fb0, fb1 = _query_columns(
                query, key_cal, 0, ci2, G, G_PAD, D, LOG2_D, KEY_FP8, SATURATE_QUERY, CALIBRATED, L2, L16, LU
            )
            q0, q1, q2, q3, q4, q5, q6, q7, q8, q9, q10, q11, q12, q13, q14, q15 = qr
            # each column's causal bound
            row_pos0 = seq_len - q_len + tok0
            row_pos1 = seq_len - q_len + tok1
            cols0 = (row_pos0, row_pos1, ok0, ok1)
            m_0 = gl.full([8, 4], float("-inf"), gl.float32, L2)
            zero = gl.zeros([8, 4], gl.float32, L2)
            state0 = (m_0, m_0, zero, zero, zero, zero)
            f_i = zero  # the value scales' reference (set by the first tile)
            acc = (
                gl.zeros([8, 4, 8], gl.float32, LU),
                gl.zeros([8, 4, 8], gl.float32, LU),
                gl.zeros([8, 4, 8], gl.float32, LU),
                gl.zeros([8, 4, 8], gl.float32, LU),
            )
            if NCT == 2:
                pr, q_bad8, q_bad9, fb8, fb9 = _query_columns(
                    query, key_cal, 8, ci2, G, G_PAD, D, LOG2_D, KEY_FP8, SATURATE_QUERY, CALIBRATED, L2, L16, LU
                )
                p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15 = pr
                cols1 = (seq_len - q_len + tok8, seq_len - q_len + tok9, ok8, ok9)
                state1 = state0
                acc_b = acc
            hi = gl.minimum(kv_hi, seq_len - q_len + gl.minimum(qc + BLOCK_Q, q_len))
            unmasked_hi = gl.minimum(hi, seq_len - q_len + qc + 1)
            where = (bt_row, stride_bc, head_base, stride_blk, hi, last_block)
            gi = gl.arange(0, 8, layout=gl.SliceLayout(1, L2))[:, None, None] + gl.zeros([8, 4, MT], gl.int32, LT)
            ti = gl.arange(0, MT, layout=gl.SliceLayout(0, gl.SliceLayout(1, LT)))[None, None, :]
            zc = gl.zeros([8, 4, MT], gl.float32, LT)
            tile = _load_tile(
                kv_lo,
                where,
                LT,
                LT4,
                MT,
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
            for start in range(kv_lo, hi, BLOCK_KV):
                cur = tile
                tile = _load_tile(
                    start + BLOCK_KV,
                    where,
                    LT,
                    LT4,
                    MT,
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
                k0, k1, k2, k3, k4, k5, kn0, kn1, vs0, vs1, vz0, vz1, v0, v1, v2, v3, v4, v5, v6, v7 = cur
                # scores S^T: [8, 4, MT] per (key row h, column j); s.. of the first column
                # tile, t.. of the second
                if KEY_FP8:
                    a0, a1, a2, a3, a4, a5, a6, a7 = _words8(k0, LT)
                    b0, b1, b2, b3, b4, b5, b6, b7 = _words8(k3, LT)
                    if NCT == 1:
                        c0, c1, c2, c3 = gl.inline_asm_elementwise(
                            _QK8,
                            _QK8_C,
                            [a0, a1, a2, a3, b0, b1, b2, b3, q0, q1, q2, q3, q4, q5, q6, q7, zc, zc, zc, zc],
                            dtype=(gl.float32, gl.float32, gl.float32, gl.float32),
                            is_pure=True,
                            pack=1,
                        )
                        s00, s01, s10, s11 = gl.inline_asm_elementwise(
                            _QK8,
                            _QK8_C,
                            [a4, a5, a6, a7, b4, b5, b6, b7, q8, q9, q10, q11, q12, q13, q14, q15, c0, c1, c2, c3],
                            dtype=(gl.float32, gl.float32, gl.float32, gl.float32),
                            is_pure=True,
                            pack=1,
                        )
                    else:
                        # the jit has no starred arguments: operand tuples concatenated
                        key_lo = (a0, a1, a2, a3, b0, b1, b2, b3, q0, q1, q2, q3, q4, q5, q6, q7)
                        key_hi = (a4, a5, a6, a7, b4, b5, b6, b7, q8, q9, q10, q11, q12, q13, q14, q15)
                        c0, c1, c2, c3, d0, d1, d2, d3 = gl.inline_asm_elementwise(
                            _QK8_2,
                            _QK8_2C,
                            key_lo + (p0, p1, p2, p3, p4, p5, p6, p7, zc, zc, zc, zc, zc, zc, zc, zc),  # noqa: RUF005
                            dtype=(gl.float32,) * 8,
                            is_pure=True,
                            pack=1,
                        )
                        s00, s01, s10, s11, t00, t01, t10, t11 = gl.inline_asm_elementwise(
                            _QK8_2,
                            _QK8_2C,
                            key_hi + (p8, p9, p10, p11, p12, p13, p14, p15, c0, c1, c2, c3, d0, d1, d2, d3),  # noqa: RUF005
                            dtype=(gl.float32,) * 8,
                            is_pure=True,
                            pack=1,
                        )
                else:
                    la, lb, ha, hb = lut
                    if KBITS == 4:
                        a0, a1, a2, a3 = _words4(k0, LT)
                        b0, b1, b2, b3 = _words4(k3, LT)
                        words = ((a0, a1, b0, b1), (a2, a3, b2, b3))
                    else:
                        words = ((k0, k1, k2, k3, k4, k5), (k0, k1, k2, k3, k4, k5))
                    if NCT == 1:
                        c0, c1, c2, c3, sq0, sq1 = gl.inline_asm_elementwise(
                            (_QK4_N if NORM_CORRECTION else _QK4) if KBITS == 4 else QK3_LO,
                            _QK4_C if KBITS == 4 else _QK3_C,
                            words[0] + (la, lb, ha, hb, q0, q1, q2, q3, q4, q5, q6, q7, zc, zc, zc, zc, zc, zc),
                            dtype=(gl.float32,) * 6,
                            is_pure=True,
                            pack=1,
                        )
                        s00, s01, s10, s11, sq0, sq1 = gl.inline_asm_elementwise(
                            (_QK4_N if NORM_CORRECTION else _QK4) if KBITS == 4 else QK3_HI,
                            _QK4_C if KBITS == 4 else _QK3_C,
                            words[1] + (la, lb, ha, hb, q8, q9, q10, q11, q12, q13, q14, q15, c0, c1, c2, c3, sq0, sq1),
                            dtype=(gl.float32,) * 6,
                            is_pure=True,
                            pack=1,
                        )
                    else:
                        c0, c1, c2, c3, d0, d1, d2, d3, sq0, sq1 = gl.inline_asm_elementwise(
                            (_QK4_2N if NORM_CORRECTION else _QK4_2) if KBITS == 4 else QK3_LO2,
                            _QK4_2C if KBITS == 4 else _QK3_2C,
                            words[0]
                            + (la, lb, ha, hb, q0, q1, q2, q3, q4, q5, q6, q7, p0, p1, p2, p3, p4, p5, p6, p7)
                            + (zc, zc, zc, zc, zc, zc, zc, zc, zc, zc),
                            dtype=(gl.float32,) * 10,
                            is_pure=True,
                            pack=1,
                        )
                        s00, s01, s10, s11, t00, t01, t10, t11, sq0, sq1 = gl.inline_asm_elementwise(
                            (_QK4_2N if NORM_CORRECTION else _QK4_2) if KBITS == 4 else QK3_HI2,
                            _QK4_2C if KBITS == 4 else _QK3_2C,
                            words[1]
                            + (la, lb, ha, hb, q8, q9, q10, q11, q12, q13, q14, q15)
                            + (p8, p9, p10, p11, p12, p13, p14, p15, c0, c1, c2, c3, d0, d1, d2, d3, sq0, sq1),
                            dtype=(gl.float32,) * 10,
                            is_pure=True,
                            pack=1,
                        )
                    # each key row's norm over its centroids' norm (the matrix unit's sum, whole
                    # in each of the row's lanes)
                    kf0 = kn0.to(gl.float32)
                    kf1 = kn1.to(gl.float32)
                    if NORM_CORRECTION:
                        kf0 = gl.where(sq0 > 0, kf0 * gl.rsqrt(sq0), 0.0)
                        kf1 = gl.where(sq1 > 0, kf1 * gl.rsqrt(sq1), 0.0)
                    s00 = s00 * kf0
                    s01 = s01 * kf0
                    s10 = s10 * kf1
                    s11 = s11 * kf1
                    if NCT == 2:
                        t00 = t00 * kf0
                        t01 = t01 * kf0
                        t10 = t10 * kf1
                        t11 = t11 * kf1
                # nested, so that the compile-time test leaves no runtime one in other formats
                if CALIBRATED:  # noqa: SIM102
                    if start == 0:
                        # position 0's score term (kernel.py): row 0 of the first row tile
                        first = (ti * 16 + gi) == 0
                        s00 = gl.where(first, s00 + fb0[:, :, None], s00)
                        s01 = gl.where(first, s01 + fb1[:, :, None], s01)
                        if NCT == 2:
                            t00 = gl.where(first, t00 + fb8[:, :, None], t00)
                            t01 = gl.where(first, t01 + fb9[:, :, None], t01)
                if start + BLOCK_KV > unmasked_hi:
                    pos0 = start + ti * 16 + gi
                    pos1 = pos0 + 8
                    s00, s01, s10, s11 = _masked(s00, s01, s10, s11, pos0, pos1, hi, cols0)
                    if NCT == 2:
                        t00, t01, t10, t11 = _masked(t00, t01, t10, t11, pos0, pos1, hi, cols1)
                # the value scales' reference, shared by the column tiles
                vsf0 = vs0.to(gl.float32)
                vsf1 = vs1.to(gl.float32)
                if INT_VALUES:
                    # the table's (2 code - 15) / 16 is (code - 7.5) / 8: the PTX gives code - 7.5
                    vsf0 = vsf0 * 0.125
                    vsf1 = vsf1 * 0.125
                smax = gl.max(gl.max(gl.maximum(vsf0, vsf1), axis=2), axis=0)[None, :]
                f_new = gl.where((smax > f_i) | (smax * 16.0 < f_i), smax, f_i)
                f_new = gl.where(f_new > 0, f_new, 1.0)
                fr = f_i / f_new
                f_i = f_new
                if CALIBRATED:
                    # r sums the probability of position 0 (kernel.py), not centred values
                    mid0 = ((start + ti * 16 + gi) == 0).to(gl.float32)
                    mid1 = mid0 * 0.0
                else:
                    mid0 = vz0.to(gl.float32) + vsf0 * (1 << (VBITS - 1))
                    mid1 = vz1.to(gl.float32) + vsf1 * (1 << (VBITS - 1))
                values = (vsf0 / f_new[:, :, None], vsf1 / f_new[:, :, None], mid0, mid1, fr)
                state0, acc, bt0, bt1 = _softmax_columns(s00, s01, s10, s11, state0, acc, q_scale, values, LU)
                x0 = _tiles(bt0, MT, L2)
                x1 = _tiles(bt1, MT, L2)
                if NCT == 2:
                    state1, acc_b, bu0, bu1 = _softmax_columns(t00, t01, t10, t11, state1, acc_b, q_scale, values, LU)
                    y0 = _tiles(bu0, MT, L2)
                    y1 = _tiles(bu1, MT, L2)
                va0 = _tiles(v0, MT, L2)
                va1 = _tiles(v1, MT, L2)
                vb0 = _tiles(v2, MT, L2)
                vb1 = _tiles(v3, MT, L2)
                vc0 = _tiles(v4, MT, L2)
                vc1 = _tiles(v5, MT, L2)
                vd0 = _tiles(v6, MT, L2)
                vd1 = _tiles(v7, MT, L2)
                for t in gl.static_range(MT):
                    v_lo = _row_tile(va0, vb0, vc0, vd0, t, LU)
                    v_hi = _row_tile(va1, vb1, vc1, vd1, t, LU)
                    pb0 = gl.convert_layout(x0[t], gl.SliceLayout(2, LU), assert_trivial=True)
                    pb1 = gl.convert_layout(x1[t], gl.SliceLayout(2, LU), assert_trivial=True)
                    pc0 = pb0
                    pc1 = pb1
                    acc_2 = acc
                    if NCT == 2:
                        pc0 = gl.convert_layout(y0[t], gl.SliceLayout(2, LU), assert_trivial=True)
                        pc1 = gl.convert_layout(y1[t], gl.SliceLayout(2, LU), assert_trivial=True)
                        acc_2 = acc_b
                    if CALIBRATED and not INT_VALUES:
                        zu = sel_u * 0
                        wa0, wa1, wb0, wb1 = _value_words(v_lo, v_hi, lo_u)
                        vla, vlb, vha, vhb = vlut
                        table = (zu + vla, zu + vlb, zu + vha, zu + vhb)
                        acc, acc_2 = _pv_step(
                            acc,
                            acc_2,
                            (wa0, wa1, wb0, wb1, sel_u, selm_u) + table,  # noqa: RUF005
                            zu,
                            pb0,
                            pb1,
                            pc0,
                            pc1,
                            _PVL3 if NCT == 1 else _PVL3_2,
                            _PVL3_C if NCT == 1 else _PVL3_2C,
                            NCT,
                        )
                    elif VBITS == 3:
                        zu = shift_u * 0
                        ops = (
                            zu + v_lo[0],
                            zu + v_hi[0],
                            zu + v_lo[1],
                            zu + v_hi[1],
                            zu + v_lo[2],
                            zu + v_hi[2],
                            zu + v_lo[3],
                            zu + v_hi[3],
                            shift_u,
                        )
                        acc, acc_2 = _pv_step(
                            acc,
                            acc_2,
                            ops,
                            zu,
                            pb0,
                            pb1,
                            pc0,
                            pc1,
                            _PV3 if NCT == 1 else _PV3_2,
                            _PV3_C if NCT == 1 else _PV3_2C,
                            NCT,
                        )
                    else:
                        # uniform 4-bit values, or tq_k4v4's symmetric ones from their bits
                        wa0, wa1, wb0, wb1 = _value_words(v_lo, v_hi, lo_u)
                        acc, acc_2 = _pv_step(
                            acc,
                            acc_2,
                            (wa0, wa1, wb0, wb1, sel_u),
                            sel_u * 0,
                            pb0,
                            pb1,
                            pc0,
                            pc1,
                            PV4_STEP,
                            _PV4_C if NCT == 1 else _PV4_2C,
                            NCT,
                        )
                    if NCT == 2:
                        acc_b = acc_2

            dest = (Out, Partial, Lse, q_start, h, split, stride_ot, stride_oh, dpos, gi2)
            cols = (n0, n1, tok0, tok1, ok0, ok1)
            calib = (ValueGain, ValueOffset, ValueFirstOffset, 0, qc, q_len)
            _store_columns(
                dest,
                acc,
                state0,
                f_i,
                q_bad0,
                q_bad1,
                cols,
                calib,
                G,
                G_PAD,
                NUM_Q_HEADS,
                NUM_SPLITS,
                D,
                LOG2_D,
                SKIP_EMPTY,
                CALIBRATED,
                L16,
            )
            if NCT == 2:
                cols = (n0 + 8, n1 + 8, tok8, tok9, ok8, ok9)
                calib = (ValueGain, ValueOffset, ValueFirstOffset, 8, qc, q_len)
                _store_columns(
                    dest,
                    acc_b,
                    state1,
                    f_i,
                    q_bad8,
                    q_bad9,
                    cols,
                    calib,
                    G,
                    G_PAD,
                    NUM_Q_HEADS,
                    NUM_SPLITS,
                    D,
                    LOG2_D,
                    SKIP_EMPTY,
                    CALIBRATED,
                    L16,
                )
