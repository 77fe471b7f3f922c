"""Triton helpers: pack and unpack little-endian bit streams held in 32-bit words.

Codes of ``BITS`` bits form one little-endian bit stream per token (code j at stream bit
``BITS*j``), which is vLLM's packing for 3 and 4 bits. Every 32 codes fill exactly
``BITS`` words, so a token's ``D`` codes are ``D // 32`` chunks of ``BITS`` words.

Unpacking is written so that every shift is a compile-time constant: each code position
of a chunk is extracted by its own expression and the positions are assembled with a
tree of ``tl.join`` (register-level, no data movement). Shift amounts computed from
``tl.arange`` would instead cost several integer operations per element.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def code3(w0, w1, w2, J: tl.constexpr):
    """Code ``J`` (0..31) of a 3-bit chunk held in words ``w0, w1, w2``."""
    A: tl.constexpr = (3 * J) // 32
    S: tl.constexpr = (3 * J) % 32
    if A == 0:
        lo = w0
        hi = w1
    elif A == 1:
        lo = w1
        hi = w2
    else:
        lo = w2
        hi = w2
    if S <= 29:
        c = (lo >> S) & 7
    else:
        # the code straddles two words
        c = ((lo >> S) | (hi << (32 - S))) & 7
    return c


@triton.jit
def _tree3_1(w0, w1, w2, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(code3(w0, w1, w2, J), code3(w0, w1, w2, J + STEP))


@triton.jit
def _tree3_2(w0, w1, w2, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(_tree3_1(w0, w1, w2, J, 2 * STEP), _tree3_1(w0, w1, w2, J + STEP, 2 * STEP))


@triton.jit
def _tree3_3(w0, w1, w2, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(_tree3_2(w0, w1, w2, J, 2 * STEP), _tree3_2(w0, w1, w2, J + STEP, 2 * STEP))


@triton.jit
def _tree3_4(w0, w1, w2, J: tl.constexpr, STEP: tl.constexpr):
    return tl.join(_tree3_3(w0, w1, w2, J, 2 * STEP), _tree3_3(w0, w1, w2, J + STEP, 2 * STEP))


@triton.jit
def unpack3(w0, w1, w2, T: tl.constexpr, D: tl.constexpr):
    """3-bit codes from the chunk words ``w0, w1, w2`` (uint32 ``[T, D // 32]``) -> ``[T, D]``.

    The join tree's last (innermost) dimension is the lowest bit of the code position,
    so the result reshapes to position order.
    """
    codes = tl.join(_tree3_4(w0, w1, w2, 0, 2), _tree3_4(w0, w1, w2, 1, 2))
    return codes.reshape(T, D)


@triton.jit
def _nib(w, J: tl.constexpr):
    return (w >> (4 * J)) & 15


@triton.jit
def unpack4(w, T: tl.constexpr, D: tl.constexpr):
    """4-bit codes from words ``w`` (uint32 ``[T, D // 8]``, low nibble first) -> ``[T, D]``."""
    a = tl.join(tl.join(_nib(w, 0), _nib(w, 4)), tl.join(_nib(w, 2), _nib(w, 6)))
    b = tl.join(tl.join(_nib(w, 1), _nib(w, 5)), tl.join(_nib(w, 3), _nib(w, 7)))
    return tl.join(a, b).reshape(T, D)


@triton.jit
def load_words(row_ptr, mask, BITS: tl.constexpr, D: tl.constexpr):
    """Load a tile's packed codes. ``row_ptr``: int32 pointers ``[T]`` to each row's first word.

    Returns three uint32 tensors: for 4 bits the words ``[T, D // 8]`` (twice more as
    unused placeholders), for 3 bits the chunk words ``w0, w1, w2`` ``[T, D // 32]``.
    """
    if BITS == 4:
        w = tl.load(row_ptr[:, None] + tl.arange(0, D // 8)[None, :], mask=mask[:, None], other=0).to(tl.uint32)
        return w, w, w
    else:
        chunk = tl.arange(0, D // 32) * 3
        p = row_ptr[:, None] + chunk[None, :]
        w0 = tl.load(p, mask=mask[:, None], other=0).to(tl.uint32)
        w1 = tl.load(p + 1, mask=mask[:, None], other=0).to(tl.uint32)
        w2 = tl.load(p + 2, mask=mask[:, None], other=0).to(tl.uint32)
        return w0, w1, w2


@triton.jit
def unpack(w0, w1, w2, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    if BITS == 4:
        return unpack4(w0, T, D)
    else:
        return unpack3(w0, w1, w2, T, D)


@triton.jit
def _put3(c, J: tl.constexpr):
    """Code position ``J`` (0..31) of a 3-bit chunk, placed in the chunk's words ``(w0, w1, w2)``."""
    A: tl.constexpr = (3 * J) // 32
    S: tl.constexpr = (3 * J) % 32
    lo = c << S
    z = c * 0
    if S > 29:
        # a code at bits 30..31 spills its high bits into the next word
        hi = c >> (32 - S)
    else:
        hi = z
    if A == 0:
        return lo, hi, z
    elif A == 1:
        return z, lo, hi
    else:
        return z, z, lo


@triton.jit
def _or3(a, b):
    return a[0] | b[0], a[1] | b[1], a[2] | b[2]


# one function per tree level: Triton jit functions cannot recurse
@triton.jit
def _pack3_1(x, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or3(_put3(a, J), _put3(b, J + STEP))


@triton.jit
def _pack3_2(x, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or3(_pack3_1(a, J, 2 * STEP), _pack3_1(b, J + STEP, 2 * STEP))


@triton.jit
def _pack3_3(x, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or3(_pack3_2(a, J, 2 * STEP), _pack3_2(b, J + STEP, 2 * STEP))


@triton.jit
def _pack3_4(x, J: tl.constexpr, STEP: tl.constexpr):
    a, b = tl.split(x)
    return _or3(_pack3_3(a, J, 2 * STEP), _pack3_3(b, J + STEP, 2 * STEP))


@triton.jit
def pack3(codes, T: tl.constexpr, D: tl.constexpr):
    """3-bit codes ``[T, D]`` -> the chunk words ``w0, w1, w2`` (uint32 ``[T, D // 32]``).

    The inverse of ``unpack3``: a tree of ``tl.split`` peels the code position's bits from
    the lowest, so every code is shifted by a compile-time amount into its word.
    """
    x = codes.reshape(T, D // 32, 2, 2, 2, 2, 2)
    a, b = tl.split(x)
    return _or3(_pack3_4(a, 0, 2), _pack3_4(b, 1, 2))


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
def store_codes(row_ptr, mask, codes, BITS: tl.constexpr, D: tl.constexpr, T: tl.constexpr):
    """Pack uint32 codes ``[T, D]`` and store them as ``D * BITS / 32`` words per row at ``row_ptr``."""
    if BITS == 4:
        w = pack4(codes, T, D)
        tl.store(row_ptr[:, None] + tl.arange(0, D // 8)[None, :], w.to(tl.int32, bitcast=True), mask=mask[:, None])
    else:
        w0, w1, w2 = pack3(codes, T, D)
        p = row_ptr[:, None] + (tl.arange(0, D // 32) * 3)[None, :]
        tl.store(p, w0.to(tl.int32, bitcast=True), mask=mask[:, None])
        tl.store(p + 1, w1.to(tl.int32, bitcast=True), mask=mask[:, None])
        tl.store(p + 2, w2.to(tl.int32, bitcast=True), mask=mask[:, None])
