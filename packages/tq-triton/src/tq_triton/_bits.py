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
def _code3(w0, w1, w2, J: tl.constexpr):
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
    return tl.join(_code3(w0, w1, w2, J), _code3(w0, w1, w2, J + STEP))


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
def _shift(x, sh):
    """``x << sh`` for sh >= 0, ``x >> -sh`` otherwise; |sh| < 32 (callers mask the rest)."""
    left = tl.minimum(tl.maximum(sh, 0), 31).to(tl.uint32)
    right = tl.minimum(tl.maximum(-sh, 0), 31).to(tl.uint32)
    return tl.where(sh >= 0, x << left, x >> right)


@triton.jit
def pack_chunk_word(codes, W: tl.constexpr, BITS: tl.constexpr):
    """Word ``W`` of every 32-code chunk: ``codes`` is uint32 ``[T, C, 32]`` -> ``[T, C]``."""
    j = tl.arange(0, 32)
    sh = BITS * j - 32 * W  # where code j's bit 0 lands relative to this word's bit 0
    hit = (sh > -BITS) & (sh < 32)
    part = _shift(codes, sh[None, None, :])
    part = tl.where(hit[None, None, :], part, 0)
    # the parts occupy disjoint bits, so their sum is their bitwise or
    return tl.sum(part, axis=2)


@triton.jit
def store_codes(row_ptr, mask, codes, BITS: tl.constexpr, D: tl.constexpr, T: tl.constexpr):
    """Pack uint32 codes ``[T, D]`` and store them as ``D * BITS / 32`` words per row at ``row_ptr``."""
    C: tl.constexpr = D // 32
    chunks = codes.reshape(T, C, 32)
    chunk = tl.arange(0, C) * BITS
    for w in tl.static_range(BITS):
        word = pack_chunk_word(chunks, w, BITS)
        tl.store(row_ptr[:, None] + (chunk + w)[None, :], word.to(tl.int32, bitcast=True), mask=mask[:, None])
