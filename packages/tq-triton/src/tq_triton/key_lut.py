"""Codebook codes looked up in a register table, in plain Triton operations: 3-bit keys,
4-bit keys, and the 3- and 4-bit Lloyd-Max values of tq's calibrated formats. The portable
kernel looks them up here on every device (cuda, xpu, the interpreter); it has no inline
assembly. The Gluon kernels look up the same tables with PTX byte permutes
(``nvidia.lut_ptx``), which on an H100 ran no faster than these operations in the
portable kernel (docs/perf/runs/2026-12-05-h100-vendor-rule).

The 8 fp16 centroids of a 3-bit codebook are 16 bytes: their low bytes fill two 32-bit
words and their high bytes two more (:func:`lut_words`). Four codes spread to selector
nibbles pick four centroids' low and high bytes from those words (:func:`_lookup4`), where
gathering each centroid from memory costs a load and a 64-bit address.

A token's 3-bit codes are a little-endian bit stream (``bitpack``); four consecutive codes
are 12 bits, 8 groups per 32-code chunk of 3 words. The selectors of the 8 groups are
assembled by a ``tl.join`` tree first, so that the 4 centroids of every group come out in
position order from one elementwise lookup.

A 16-entry codebook does not fit one 8-byte table, but tq's are symmetric (centroid
``15 - c`` is ``-centroid[c]``): the table holds the 8 magnitudes, a code's low 3 bits
(flipped for the negative half) select its magnitude, and its bit 3 its sign
(:func:`lut16_values`). Those codes read their magnitudes whole from two 64-bit words (one
64-bit select and shift per code) and take the sign as a bit ORed in, where picking a low
and a high byte from the 32-bit words and negating by a select costs about twice the
instructions; the plan keeps the byte picks where the wider values measured slower
(``plan.wide_key_tables``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .bitpack import join4


def lut_words(centroids_fp16: torch.Tensor) -> torch.Tensor:
    """The register table of an 8-entry fp16 codebook: int32 ``[4]`` = (low bytes of
    centroids 0-3, of 4-7, high bytes of 0-3, of 4-7), byte ``i`` of a word holding
    centroid ``i`` (mod 4). A 16-entry codebook must be symmetric (centroid ``15 - i`` is
    ``-centroid[i]``, as every Lloyd-Max codebook of tq's is, bit for bit in fp16): its table
    holds the 8 magnitudes, centroids 8-15 (:func:`lut16_values`)."""
    if centroids_fp16.dtype != torch.float16 or centroids_fp16.numel() not in (8, 16):
        got = f"{centroids_fp16.dtype} {tuple(centroids_fp16.shape)}"
        raise ValueError(f"lut_words: expected 8 or 16 fp16 centroids, got {got}")
    if centroids_fp16.numel() == 16:
        if not torch.equal(centroids_fp16, -centroids_fp16.flip(0)):
            raise ValueError("lut_words: a 16-entry codebook must be symmetric (centroid 15 - i == -centroid i)")
        centroids_fp16 = centroids_fp16[8:]
    bits = centroids_fp16.detach().cpu().view(torch.int16).to(torch.int64) & 0xFFFF
    lo, hi = bits & 0xFF, bits >> 8
    words = []
    for table in (lo[:4], lo[4:], hi[:4], hi[4:]):
        w = sum(int(b) << (8 * i) for i, b in enumerate(table.tolist()))
        words.append(w - (1 << 32) if w >= 1 << 31 else w)
    return torch.tensor(words, dtype=torch.int32, device=centroids_fp16.device)


@triton.jit
def _table_words(Lut):
    """The four uint32 words of :func:`lut_words`' table at int32 pointer ``Lut``."""
    Lut = Lut.to(tl.pointer_type(tl.int32))
    la = tl.load(Lut).to(tl.uint32, bitcast=True)
    lb = tl.load(Lut + 1).to(tl.uint32, bitcast=True)
    ha = tl.load(Lut + 2).to(tl.uint32, bitcast=True)
    hb = tl.load(Lut + 3).to(tl.uint32, bitcast=True)
    return la, lb, ha, hb


@triton.jit
def _byte_pick(lo, hi, nib):
    """Byte ``nib`` (0..7) of the 8 bytes ``lo`` (0-3), ``hi`` (4-7): uint32, in bits 0-7."""
    w = tl.where(nib < 4, lo, hi)
    return (w >> ((nib & 3) * 8)) & 0xFF


@triton.jit
def _fp16_of(lo_byte, hi_byte):
    return (lo_byte | (hi_byte << 8)).to(tl.uint16).to(tl.float16, bitcast=True)


@triton.jit
def _square_sum(c0, c1, c2, c3):
    """The float32 sum of the squares of four fp16 centroids."""
    f0 = c0.to(tl.float32)
    f1 = c1.to(tl.float32)
    f2 = c2.to(tl.float32)
    f3 = c3.to(tl.float32)
    return (f0 * f0 + f2 * f2) + (f1 * f1 + f3 * f3)


@triton.jit
def _lookup4(sel, la, lb, ha, hb):
    """The centroids of the four codes whose selector nibbles are in ``sel`` (uint32, bits
    0-15, each nibble 0..7), in nibble order, and the float32 sum of their squares."""
    n0 = sel & 15
    n1 = (sel >> 4) & 15
    n2 = (sel >> 8) & 15
    n3 = (sel >> 12) & 15
    c0 = _fp16_of(_byte_pick(la, lb, n0), _byte_pick(ha, hb, n0))
    c1 = _fp16_of(_byte_pick(la, lb, n1), _byte_pick(ha, hb, n1))
    c2 = _fp16_of(_byte_pick(la, lb, n2), _byte_pick(ha, hb, n2))
    c3 = _fp16_of(_byte_pick(la, lb, n3), _byte_pick(ha, hb, n3))
    return c0, c1, c2, c3, _square_sum(c0, c1, c2, c3)


def selectors_fn(w0, w1, w2, G: tl.constexpr):
    """Selector nibbles of codes ``4G .. 4G+3`` of a 3-bit chunk (words ``w0, w1, w2``,
    uint32): the group's 12 stream bits ``12G .. 12G+11``, each code moved to its own nibble.
    Operators only, so that both this module (:data:`group_selectors`) and the Gluon kernel
    compile the same function."""
    S: tl.constexpr = (12 * G) % 32
    if G < 2:
        x = w0 >> S
    elif G == 2:
        x = (w0 >> 24) | (w1 << 8)  # bits 24..35 straddle w0 and w1
    elif G < 5:
        x = w1 >> S
    elif G == 5:
        x = (w1 >> 28) | (w2 << 4)  # bits 60..71 straddle w1 and w2
    else:
        x = w2 >> S
    # two spreading steps: code pairs to bytes, then codes to nibbles
    t = (x & 0x3F) | ((x << 2) & 0x3F00)
    return (t & 0x0707) | ((t << 1) & 0x7070)


group_selectors = triton.jit(selectors_fn)


@triton.jit
def _sel1(w0, w1, w2, G: tl.constexpr, STEP: tl.constexpr):
    return tl.join(group_selectors(w0, w1, w2, G), group_selectors(w0, w1, w2, G + STEP))


@triton.jit
def _sel2(w0, w1, w2, G: tl.constexpr, STEP: tl.constexpr):
    return tl.join(_sel1(w0, w1, w2, G, 2 * STEP), _sel1(w0, w1, w2, G + STEP, 2 * STEP))


@triton.jit
def lut_keys(w0, w1, w2, Lut, T: tl.constexpr, D: tl.constexpr):
    """fp16 centroids ``[T, D]`` of a 3-bit key tile and each token's squared centroid
    norm ``[T]``, as ``codebook_decode.codebook_keys`` returns them. ``w0, w1, w2``: the
    chunk words ``[T, D // 32]``; ``Lut``: int32 pointer to :func:`lut_words`' table."""
    la, lb, ha, hb = _table_words(Lut)
    # [T, D // 32, 2, 2, 2]: the group index's highest bit first, so groups flatten in order
    sel = tl.join(_sel2(w0, w1, w2, 0, 2), _sel2(w0, w1, w2, 1, 2))
    c0, c1, c2, c3, sq = _lookup4(sel, la, lb, ha, hb)
    # positions 4G + 2k + m
    k16 = join4(c0, c1, c2, c3).reshape(T, D)
    return k16, tl.sum(sq.reshape(T, D // 4), axis=1)


@triton.jit
def _wide_table(lo, hi):
    """Four fp16 magnitudes as one uint64 word (magnitude ``i`` in bits ``16 i`` up) from
    :func:`lut_words`' words of their low bytes ``lo`` and high bytes ``hi``."""
    lo = lo.to(tl.uint64)
    hi = hi.to(tl.uint64)
    m = tl.zeros((), tl.uint64)
    for i in tl.static_range(4):
        m |= (((lo >> (8 * i)) & 0xFF) | (((hi >> (8 * i)) & 0xFF) << 8)) << (16 * i)
    return m


@triton.jit
def _pick16(m03, m47, sel, raw, K: tl.constexpr):
    """The fp16 centroid of code ``K`` (0..3) of ``sel`` / ``raw``: its magnitude by one 64-bit
    select and one 64-bit shift, its sign the code's bit 3 inverted, moved to bit 15."""
    n = (sel >> (4 * K)) & 7
    mag = (tl.where(n < 4, m03, m47) >> ((n & 3) * 16).to(tl.uint64)).to(tl.uint32) & 0xFFFF
    sign = (~raw << (12 - 4 * K)) & 0x8000
    return (mag | sign).to(tl.uint16).to(tl.float16, bitcast=True)


@triton.jit
def _lookup4_signed(sel, raw, la, lb, ha, hb, WIDE: tl.constexpr):
    """:func:`_lookup4` in a symmetric 16-entry table (:func:`lut16_values`): ``sel`` the
    magnitude selectors, ``raw`` the four 4-bit codes (uint32, bits 0-15). ``WIDE``: the
    magnitudes are read whole from two 64-bit words (:func:`_wide_table`), a code costing a
    64-bit select and shift and its sign one OR; otherwise byte by byte from the 32-bit words
    (a select, a shift and a mask per byte) and negated by a select."""
    if WIDE:
        m03 = _wide_table(la, ha)
        m47 = _wide_table(lb, hb)
        c0 = _pick16(m03, m47, sel, raw, 0)
        c1 = _pick16(m03, m47, sel, raw, 1)
        c2 = _pick16(m03, m47, sel, raw, 2)
        c3 = _pick16(m03, m47, sel, raw, 3)
        sq = _square_sum(c0, c1, c2, c3)
    else:
        c0, c1, c2, c3, sq = _lookup4(sel, la, lb, ha, hb)
        # bit 3 of a code is its sign (set: positive)
        c0 = tl.where((raw & 0x8) != 0, c0, -c0)
        c1 = tl.where((raw & 0x80) != 0, c1, -c1)
        c2 = tl.where((raw & 0x800) != 0, c2, -c2)
        c3 = tl.where((raw & 0x8000) != 0, c3, -c3)
    return c0, c1, c2, c3, sq


def magnitude_selectors_fn(w):
    """The magnitude selectors of the 8 4-bit codes of each word ``w`` (uint32), nibble for
    nibble: ``c ^ 7`` where the code's bit 3 is clear, ``c & 7`` where it is set (see
    :func:`lut16_values`). Operators only, so that both this module and the Gluon kernel
    compile the same function."""
    below = ((w >> 3) & 0x11111111) ^ 0x11111111  # 1 in the nibbles of codes 0-7
    return (w ^ (below * 7)) & 0x77777777


magnitude_selectors = triton.jit(magnitude_selectors_fn)


@triton.jit
def lut16_values(w, Lut, T: tl.constexpr, D: tl.constexpr, WIDE: tl.constexpr = True):
    """fp16 centroids ``[T, D]`` of a tile of 4-bit codes of a symmetric codebook and each
    token's squared centroid norm ``[T]``, as ``codebook_decode.codebook_keys`` returns them.
    ``w``: the words ``[T, D // 8]`` (8 codes each, low nibble first); ``Lut``: int32 pointer
    to :func:`lut_words`' table of the codebook's magnitudes (centroids 8-15).

    Code ``c`` is ``+magnitude[c - 8]`` from 8 on and ``-magnitude[7 - c]`` below, so a
    nibble's magnitude selector is ``c ^ 7`` where bit 3 is clear and ``c & 7`` where it is
    set: one xor with 7 times the complement of bit 3, for the 8 nibbles of a word at once.
    The 4-code groups are the words' low and high halves. ``WIDE``: see :func:`_lookup4_signed`
    (``plan.wide_key_tables``)."""
    la, lb, ha, hb = _table_words(Lut)
    sel = magnitude_selectors(w)
    # [T, D // 8, 2]: a word's low half (codes 0-3) first
    halves = tl.join(w & 0xFFFF, w >> 16)
    c0, c1, c2, c3, sq = _lookup4_signed(tl.join(sel & 0xFFFF, sel >> 16), halves, la, lb, ha, hb, WIDE)
    # positions 8W + 4H + 2k + m, as in lut_keys
    v16 = join4(c0, c1, c2, c3).reshape(T, D)
    return v16, tl.sum(sq.reshape(T, D // 4), axis=1)
