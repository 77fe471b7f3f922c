"""Triton helpers: pack and unpack little-endian bit streams held in 32-bit words.

Codes of ``BITS`` bits form one little-endian bit stream per token (code j at stream bit
``BITS*j``), which is vLLM's packing for 3 and 4 bits and tq's for 5 and 6. Every 32 codes
fill exactly ``BITS`` words, so a token's ``D`` codes are ``D // 32`` chunks of ``BITS``
words; 4-bit codes are also read as plain words of 8 codes each.

A row's words travel as a tuple of six tensors (:func:`load_words`): the chunk words
``[T, D // 32]`` for 3, 5 and 6 bits (entries past ``BITS`` repeat the last one and are
never read), or six references to the ``[T, D // 8]`` words for 4 bits.

Unpacking is written so that every shift is a compile-time constant: each code position
of a chunk is extracted by its own expression and the positions are assembled with a
tree of ``tl.join`` (register-level, no data movement). Shift amounts computed from
``tl.arange`` would instead cost several integer operations per element.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def chunk_code(ws, BITS: tl.constexpr, J: tl.constexpr):
    """Code ``J`` (0..31) of a chunk of ``BITS`` (3, 5 or 6) words held in the tuple ``ws``."""
    A: tl.constexpr = (BITS * J) // 32
    S: tl.constexpr = (BITS * J) % 32
    MASK: tl.constexpr = (1 << BITS) - 1
    if S + BITS <= 32:
        c = (ws[A] >> S) & MASK
    else:
        # the code straddles two words
        c = ((ws[A] >> S) | (ws[A + 1] << (32 - S))) & MASK
    return c


# one function per tree level: Triton jit functions cannot recurse
@triton.jit
def _tree_1(ws, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(chunk_code(ws, BITS, J), chunk_code(ws, BITS, J + STEP))


@triton.jit
def _tree_2(ws, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(_tree_1(ws, BITS, J, 2 * STEP), _tree_1(ws, BITS, J + STEP, 2 * STEP))


@triton.jit
def _tree_3(ws, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(_tree_2(ws, BITS, J, 2 * STEP), _tree_2(ws, BITS, J + STEP, 2 * STEP))


@triton.jit
def _tree_4(ws, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(_tree_3(ws, BITS, J, 2 * STEP), _tree_3(ws, BITS, J + STEP, 2 * STEP))


@triton.jit
def unpack_chunks(ws, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    """3-, 5- or 6-bit codes from the chunk words ``ws`` (uint32 ``[T, D // 32]`` each) ->
    ``[T, D]``.

    The join tree's last (innermost) dimension is the lowest bit of the code position,
    so the result reshapes to position order.
    """
    codes = tl.join(_tree_4(ws, BITS, 0, 2), _tree_4(ws, BITS, 1, 2))
    return codes.reshape(T, D)


@triton.jit
def join4(x0, x1, x2, x3):
    """``x0 .. x3`` stacked along two new last axes ``[..., 2, 2]`` that flatten to
    ``x0, x1, x2, x3`` in that order (register-level, no data movement)."""
    return tl.join(tl.join(x0, x2), tl.join(x1, x3))


@triton.jit
def fp16_halves(x):
    """The two fp16 halves of the 32-bit words ``x`` (low half first, in a new last axis)."""
    return tl.join(x.to(tl.uint16), (x >> 16).to(tl.uint16)).to(tl.float16, bitcast=True)


@triton.jit
def _nib(w, J: tl.constexpr):
    return (w >> (4 * J)) & 15


@triton.jit
def unpack4(w, T: tl.constexpr, D: tl.constexpr):
    """4-bit codes from words ``w`` (uint32 ``[T, D // 8]``, low nibble first) -> ``[T, D]``."""
    a = join4(_nib(w, 0), _nib(w, 2), _nib(w, 4), _nib(w, 6))
    b = join4(_nib(w, 1), _nib(w, 3), _nib(w, 5), _nib(w, 7))
    return tl.join(a, b).reshape(T, D)


@triton.jit
def load_words(row_ptr, mask, BITS: tl.constexpr, D: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    """Load a tile's packed codes. ``row_ptr``: int32 pointers ``[T]`` to each row's first word.

    Returns the row's words as a tuple of six uint32 tensors (see the module docstring):
    for 4 bits the words ``[T, D // 8]`` six times, for 3, 5 and 6 bits the chunk words
    ``[T, D // 32]``, the last one repeated past ``BITS``. ``TRANSPOSED`` (3 bits only;
    ``attention.plan.transposed_chunks``): the chunk words are loaded as ``[D // 32, T]``
    and transposed, the same values in another register layout.
    """
    if BITS == 4:
        w = tl.load(row_ptr[:, None] + tl.arange(0, D // 8)[None, :], mask=mask[:, None], other=0).to(tl.uint32)
        return w, w, w, w, w, w
    elif BITS == 3 and TRANSPOSED:
        # Triton then lays the lanes along the chunks rather than the tokens (see
        # attention.plan.transposed_chunks for the compilers where that pays)
        pt = row_ptr[None, :] + (tl.arange(0, D // 32) * BITS)[:, None]
        w0 = tl.trans(tl.load(pt, mask=mask[None, :], other=0).to(tl.uint32))
        w1 = tl.trans(tl.load(pt + 1, mask=mask[None, :], other=0).to(tl.uint32))
        w2 = tl.trans(tl.load(pt + 2, mask=mask[None, :], other=0).to(tl.uint32))
        return w0, w1, w2, w2, w2, w2
    else:
        p = row_ptr[:, None] + (tl.arange(0, D // 32) * BITS)[None, :]
        w0 = tl.load(p, mask=mask[:, None], other=0).to(tl.uint32)
        w1 = tl.load(p + 1, mask=mask[:, None], other=0).to(tl.uint32)
        w2 = tl.load(p + 2, mask=mask[:, None], other=0).to(tl.uint32)
        w3 = tl.load(p + 3, mask=mask[:, None], other=0).to(tl.uint32)
        w4 = tl.load(p + 4, mask=mask[:, None], other=0).to(tl.uint32)
        w5 = w4
        if BITS == 6:
            w5 = tl.load(p + 5, mask=mask[:, None], other=0).to(tl.uint32)
        return w0, w1, w2, w3, w4, w5


@triton.jit
def unpack(ws, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    """Codes ``[T, D]`` from a tile's words (:func:`load_words`)."""
    if BITS == 4:
        return unpack4(ws[0], T, D)
    else:
        return unpack_chunks(ws, BITS, T, D)


@triton.jit
def _put(c, BITS: tl.constexpr, J: tl.constexpr):
    """Code position ``J`` (0..31) of a chunk of ``BITS`` words, placed in the chunk's six
    words (those past ``BITS`` stay 0)."""
    A: tl.constexpr = (BITS * J) // 32
    S: tl.constexpr = (BITS * J) % 32
    lo = c << S
    z = c * 0
    if S + BITS > 32:
        # a code near the word's top spills its high bits into the next word
        hi = c >> (32 - S)
    else:
        hi = z
    return (
        _part(lo, hi, z, A, 0),
        _part(lo, hi, z, A, 1),
        _part(lo, hi, z, A, 2),
        _part(lo, hi, z, A, 3),
        _part(lo, hi, z, A, 4),
        _part(lo, hi, z, A, 5),
    )


@triton.jit
def _part(lo, hi, z, A: tl.constexpr, I: tl.constexpr):
    """What word ``I`` of a chunk gets of a code that starts in word ``A``."""
    if I == A:
        return lo
    elif I == A + 1:
        return hi
    else:
        return z


@triton.jit
def _or(a, b):
    return a[0] | b[0], a[1] | b[1], a[2] | b[2], a[3] | b[3], a[4] | b[4], a[5] | b[5]


# one function per tree level: Triton jit functions cannot recurse
@triton.jit
def _pack_1(x, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or(_put(a, BITS, J), _put(b, BITS, J + STEP))


@triton.jit
def _pack_2(x, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or(_pack_1(a, BITS, J, 2 * STEP), _pack_1(b, BITS, J + STEP, 2 * STEP))


@triton.jit
def _pack_3(x, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or(_pack_2(a, BITS, J, 2 * STEP), _pack_2(b, BITS, J + STEP, 2 * STEP))


@triton.jit
def _pack_4(x, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or(_pack_3(a, BITS, J, 2 * STEP), _pack_3(b, BITS, J + STEP, 2 * STEP))


@triton.jit
def pack_chunks(codes, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    """3-, 5- or 6-bit codes ``[T, D]`` -> the chunk words (six uint32 ``[T, D // 32]``, those
    past ``BITS`` zero).

    The inverse of :func:`unpack_chunks`: a tree of ``tl.split`` peels the code position's
    bits from the lowest, so every code is shifted by a compile-time amount into its word.
    """
    x = codes.reshape(T, D // 32, 2, 2, 2, 2, 2)
    a, b = tl.split(x)
    return _or(_pack_4(a, BITS, 0, 2), _pack_4(b, BITS, 1, 2))


@triton.jit
def pack4(codes, T: tl.constexpr, D: tl.constexpr):
    """4-bit codes ``[T, D]`` -> words ``[T, D // 8]``, low nibble first (the inverse of ``unpack4``)."""
    x = codes.reshape(T, D // 8, 2, 2, 2)
    e, o = tl.split(x)  # nibble index bit 0
    e0, e1 = tl.split(e)  # bit 1
    o0, o1 = tl.split(o)
    e00, e01 = tl.split(e0)  # bit 2
    e10, e11 = tl.split(e1)
    o00, o01 = tl.split(o0)
    o10, o11 = tl.split(o1)
    return e00 | (o00 << 4) | (e10 << 8) | (o10 << 12) | (e01 << 16) | (o01 << 20) | (e11 << 24) | (o11 << 28)


@triton.jit
def _store_word(p, mask, w, I: tl.constexpr, BITS: tl.constexpr):
    if I < BITS:
        tl.store(p + I, w.to(tl.int32, bitcast=True), mask=mask[:, None])


@triton.jit
def store_codes(row_ptr, mask, codes, BITS: tl.constexpr, D: tl.constexpr, T: tl.constexpr):
    """Pack uint32 codes ``[T, D]`` and store them as ``D * BITS / 32`` words per row at ``row_ptr``."""
    if BITS == 4:
        w = pack4(codes, T, D)
        tl.store(row_ptr[:, None] + tl.arange(0, D // 8)[None, :], w.to(tl.int32, bitcast=True), mask=mask[:, None])
    else:
        ws = pack_chunks(codes, BITS, T, D)
        p = row_ptr[:, None] + (tl.arange(0, D // 32) * BITS)[None, :]
        _store_word(p, mask, ws[0], 0, BITS)
        _store_word(p, mask, ws[1], 1, BITS)
        _store_word(p, mask, ws[2], 2, BITS)
        _store_word(p, mask, ws[3], 3, BITS)
        _store_word(p, mask, ws[4], 4, BITS)
        _store_word(p, mask, ws[5], 5, BITS)
