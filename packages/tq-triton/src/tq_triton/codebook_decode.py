"""Triton helper: codebook vectors (Lloyd-Max keys, and the values of tq's calibrated formats)
decoded where the packed words are, with their centroid norms.

A tile's codes are gathered from the fp16 codebook one code position at a time on
the words as loaded (``[T, W]``, each thread holding whole words), and a ``tl.join``
tree assembles the ``[T, D]`` operand, as ``bitpack.unpack`` does for codes. The squared
centroid norm that norm correction needs is summed in the same tree, inside each
thread: summed on the assembled tile instead, where ``D`` is spread over lanes, it would
cost shuffles and replicated divisions per token. :func:`codebook_tile` picks this gather
(5- and 6-bit codebooks) or ``key_lut``'s register tables (3- and 4-bit codebooks).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .bitpack import chunk_code
from .key_lut import lut16_values, lut_keys


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


@triton.jit
def codebook_tile(
    ws, Table, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr, TABLE: tl.constexpr, WIDE: tl.constexpr = True
):
    """:func:`codebook_keys` for keys or calibrated values: ``TABLE`` False gathers the
    centroids from ``Table`` (the fp16 codebook); True looks them up in the register table of
    a 3- or 4-bit codebook in Triton integer operations (``Table`` is then
    ``key_lut.lut_words``' table; ``plan.table_keys``), 4-bit ones through its 64-bit form
    with ``WIDE`` (``key_lut.lut16_values``)."""
    if TABLE:
        tl.static_assert(BITS == 3 or BITS == 4, "only 3- and 4-bit codebooks have a register table")
    if TABLE and BITS == 3:
        return lut_keys(ws[0], ws[1], ws[2], Table, T, D)
    elif TABLE:
        return lut16_values(ws[0], Table, T, D, WIDE)
    else:
        return codebook_keys(ws, Table, BITS, T, D)
