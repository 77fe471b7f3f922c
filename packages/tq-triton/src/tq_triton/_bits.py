"""Triton helpers: pack and unpack little-endian bit streams held in 32-bit words.

Codes of ``BITS`` bits are laid out as one little-endian bit stream per token (code j at
stream bit ``BITS*j``), which is vLLM's packing for 3 and 4 bits. Every 32 codes fill
exactly ``BITS`` words, so a token's ``D`` codes are ``D // 32`` chunks of ``BITS`` words.
Word ``w`` of a chunk holds stream bits ``[32w, 32w + 32)``; code ``j`` of the chunk
overlaps it when ``32w - BITS < BITS*j < 32w + 32``.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
def unpack_chunk_word(word, W: tl.constexpr, BITS: tl.constexpr):
    """Bits that word ``W`` (uint32 ``[T, C]``) contributes to the 32 codes of its chunk: ``[T, C, 32]``."""
    j = tl.arange(0, 32)
    sh = 32 * W - BITS * j
    hit = (sh > -32) & (sh < BITS)
    part = _shift(word[:, :, None], sh[None, None, :])
    return tl.where(hit[None, None, :], part, 0)


@triton.jit
def load_codes(row_ptr, mask, BITS: tl.constexpr, D: tl.constexpr, T: tl.constexpr):
    """Load and unpack ``D`` codes for each of ``T`` rows -> uint32 ``[T, D]``.

    ``row_ptr``: int32 pointers ``[T]`` to each row's first word; ``mask``: ``[T]``.
    """
    if BITS == 4:
        # a word holds 8 whole codes: no code straddles two words
        words = tl.load(row_ptr[:, None] + tl.arange(0, D // 8)[None, :], mask=mask[:, None], other=0)
        sh = (tl.arange(0, 8) * 4).to(tl.uint32)
        codes = (words.to(tl.uint32)[:, :, None] >> sh[None, None, :]) & 15
    else:
        C: tl.constexpr = D // 32
        chunk = tl.arange(0, C) * BITS
        codes = tl.zeros((T, C, 32), dtype=tl.uint32)
        for w in tl.static_range(BITS):
            word = tl.load(row_ptr[:, None] + (chunk + w)[None, :], mask=mask[:, None], other=0)
            codes = codes | unpack_chunk_word(word.to(tl.uint32), w, BITS)
        codes = codes & ((1 << BITS) - 1)
    return codes.reshape(T, D)


@triton.jit
def store_codes(row_ptr, mask, codes, BITS: tl.constexpr, D: tl.constexpr, T: tl.constexpr):
    """Pack uint32 codes ``[T, D]`` and store them as ``D * BITS / 32`` words per row at ``row_ptr``."""
    C: tl.constexpr = D // 32
    chunks = codes.reshape(T, C, 32)
    chunk = tl.arange(0, C) * BITS
    for w in tl.static_range(BITS):
        word = pack_chunk_word(chunks, w, BITS)
        tl.store(row_ptr[:, None] + (chunk + w)[None, :], word.to(tl.int32, bitcast=True), mask=mask[:, None])
