"""Triton helper: codebook vectors (Lloyd-Max keys, and the values of tq's calibrated formats)
decoded where the packed words are, with their centroid norms. Plain Triton operations: the
portable kernel compiles this module on every device.

Two reads of the fp16 codebook, by code width (:func:`codebook_tile`):

- **Pair table** (3- and 4-bit codes): two consecutive codes are ``2 BITS`` consecutive bits
  of the stream (a byte of a 4-bit word), and that field indexes :func:`pair_words`' table of
  ``n * n`` fp16 pairs (64 or 256 words, 256 B or 1 KiB, cached on chip). One load yields
  two centroids already packed as the matrix unit takes them, where gathering costs a load
  and a 64-bit address per code; statically the inner loop of a decode tile runs 15-30%
  fewer instructions than with the gather (``docs/perf/scripts/static_loop.py --table``).
- **Gather** (5- and 6-bit codes, whose pair tables would be 4 KiB and 16 KiB): one load
  per code from the fp16 codebook.

A tile's codes are read one code (or pair) position at a time on the words as loaded
(``[T, W]``, each thread holding whole words), and a ``tl.join`` tree assembles the ``[T, D]``
operand, as ``bitpack.unpack`` does for codes. The squared centroid norm that norm
correction needs is summed in the same tree, inside each thread: summed on the assembled
tile instead, where ``D`` is spread over lanes, it would cost shuffles and replicated
divisions per token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .bitpack import chunk_code, half_pairs


@triton.jit
def _cent(ws, Centroids, BITS: tl.constexpr, J: tl.constexpr):
    """Centroid of code position ``J`` (fp16) and its square (fp32)."""
    if BITS == 4:
        code = (ws[0] >> (4 * J)) & 15
    else:
        code = chunk_code(ws, BITS, J)
    c = tl.load(Centroids + code)
    cf = c.to(tl.float32)
    return c, cf * cf


# one function per tree level: Triton jit functions cannot recurse
@triton.jit
def _tree1(ws, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _cent(ws, Centroids, BITS, J)
    b, sb = _cent(ws, Centroids, BITS, J + STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _tree2(ws, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _tree1(ws, Centroids, BITS, J, 2 * STEP)
    b, sb = _tree1(ws, Centroids, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _tree3(ws, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _tree2(ws, Centroids, BITS, J, 2 * STEP)
    b, sb = _tree2(ws, Centroids, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _tree4(ws, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _tree3(ws, Centroids, BITS, J, 2 * STEP)
    b, sb = _tree3(ws, Centroids, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def codebook_keys(ws, Centroids, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    """fp16 centroids ``[T, D]`` of a tile of codebook vectors and each token's squared
    centroid norm ``[T]``.

    ``ws``: the words from ``bitpack.load_words``; ``Centroids``: the fp16 codebook of
    ``BITS`` bits. The join trees mirror ``bitpack.unpack_chunks`` / ``unpack4``, so
    positions come out in order.
    """
    # one tree level per bit of the code position within a word (4 bits: 8 codes) or a
    # chunk of BITS words (3, 5 and 6 bits: 32 codes); the lowest bit is split off here
    if BITS == 4:
        a, sa = _tree2(ws, Centroids, BITS, 0, 2)
        b, sb = _tree2(ws, Centroids, BITS, 1, 2)
    else:
        a, sa = _tree4(ws, Centroids, BITS, 0, 2)
        b, sb = _tree4(ws, Centroids, BITS, 1, 2)
    return tl.join(a, b).reshape(T, D), tl.sum(sa + sb, axis=1)


def pair_words(centroids_fp16: torch.Tensor) -> torch.Tensor:
    """The pair table of an fp16 codebook of ``n`` entries (8 or 16): int32 ``[n * n]``, entry
    ``a + n b`` holding centroid ``a`` in its low half and centroid ``b`` in its high half, so
    that the ``2 BITS`` stream bits of two consecutive codes (``a`` first) index their pair."""
    n = centroids_fp16.numel()
    if centroids_fp16.dtype != torch.float16 or n not in (8, 16):
        got = f"{centroids_fp16.dtype} {tuple(centroids_fp16.shape)}"
        raise ValueError(f"pair_words: expected 8 or 16 fp16 centroids, got {got}")
    bits = centroids_fp16.detach().cpu().view(torch.int16).to(torch.int64) & 0xFFFF
    idx = torch.arange(n * n)
    words = bits[idx % n] | (bits[idx // n] << 16)
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32).to(centroids_fp16.device)


@triton.jit
def _pair(ws, Pairs, BITS: tl.constexpr, J: tl.constexpr):
    """Codes ``2J`` and ``2J + 1`` of a word (4 bits) or chunk (3 bits) looked up together:
    their fp16 centroids as one uint32 (low half first) and the float32 sum of their squares."""
    if BITS == 4:
        idx = (ws[0] >> (8 * J)) & 0xFF
    else:
        idx = chunk_code(ws, 2 * BITS, J)
    pr = tl.load(Pairs + idx).to(tl.uint32, bitcast=True)
    lo = pr.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    hi = (pr >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    return pr, lo * lo + hi * hi


@triton.jit
def _ptree1(ws, Pairs, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _pair(ws, Pairs, BITS, J)
    b, sb = _pair(ws, Pairs, BITS, J + STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _ptree2(ws, Pairs, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _ptree1(ws, Pairs, BITS, J, 2 * STEP)
    b, sb = _ptree1(ws, Pairs, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _ptree3(ws, Pairs, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _ptree2(ws, Pairs, BITS, J, 2 * STEP)
    b, sb = _ptree2(ws, Pairs, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def pair_keys(ws, Pairs, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    """:func:`codebook_keys` of a 3- or 4-bit codebook from its pair table
    (:func:`pair_words`): one load per two codes, the fp16 pair split once."""
    if BITS == 4:
        a, sa = _ptree1(ws, Pairs, BITS, 0, 2)
        b, sb = _ptree1(ws, Pairs, BITS, 1, 2)
    else:
        a, sa = _ptree3(ws, Pairs, BITS, 0, 2)
        b, sb = _ptree3(ws, Pairs, BITS, 1, 2)
    return half_pairs(tl.join(a, b).reshape(T, D // 2)).reshape(T, D), tl.sum(sa + sb, axis=1)


@triton.jit
def codebook_tile(ws, Table, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr, PAIRS: tl.constexpr):
    """:func:`codebook_keys` for keys or calibrated values: ``PAIRS`` (3- and 4-bit codebooks,
    ``plan.table_keys`` / ``plan.table_values``) reads two codes at a time from ``Table``, the
    codebook's pair table (:func:`pair_words`); otherwise ``Table`` is the fp16 codebook and
    each code is gathered from it."""
    if PAIRS:
        tl.static_assert(BITS == 3 or BITS == 4, "only 3- and 4-bit codebooks have a pair table")
        return pair_keys(ws, Table, BITS, T, D)
    else:
        return codebook_keys(ws, Table, BITS, T, D)
