"""Triton helper: codebook keys decoded where the packed words are, with their centroid norms.

A key tile's codes are gathered from the fp16 codebook one code position at a time on
the words as loaded (``[T, W]``, each thread holding whole words), and a ``tl.join``
tree assembles the ``[T, D]`` operand, as ``bitpack.unpack`` does for codes. The squared
centroid norm that norm correction needs is summed in the same tree, inside each
thread: summed on the assembled tile instead, where ``D`` is spread over lanes, it would
cost shuffles and replicated divisions per token.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .bitpack import code3


@triton.jit
def _cent(w0, w1, w2, Centroids, BITS: tl.constexpr, J: tl.constexpr):
    """Centroid of code position ``J`` (fp16) and its square (fp32)."""
    if BITS == 4:
        code = (w0 >> (4 * J)) & 15
    else:
        code = code3(w0, w1, w2, J)
    c = tl.load(Centroids + code)
    cf = c.to(tl.float32)
    return c, cf * cf


# one function per tree level: Triton jit functions cannot recurse
@triton.jit
def _tree1(w0, w1, w2, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _cent(w0, w1, w2, Centroids, BITS, J)
    b, sb = _cent(w0, w1, w2, Centroids, BITS, J + STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _tree2(w0, w1, w2, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _tree1(w0, w1, w2, Centroids, BITS, J, 2 * STEP)
    b, sb = _tree1(w0, w1, w2, Centroids, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _tree3(w0, w1, w2, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _tree2(w0, w1, w2, Centroids, BITS, J, 2 * STEP)
    b, sb = _tree2(w0, w1, w2, Centroids, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _tree4(w0, w1, w2, Centroids, BITS: tl.constexpr, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _tree3(w0, w1, w2, Centroids, BITS, J, 2 * STEP)
    b, sb = _tree3(w0, w1, w2, Centroids, BITS, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def codebook_keys(w0, w1, w2, Centroids, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    """fp16 centroids ``[T, D]`` of a key tile and each token's squared centroid norm ``[T]``.

    ``w0, w1, w2``: the words from ``bitpack.load_words`` (3 bits: chunk words
    ``[T, D // 32]``; 4 bits: ``w0`` = ``[T, D // 8]``). ``Centroids``: the fp16 codebook.
    The join trees mirror ``bitpack.unpack3`` / ``unpack4``, so positions come out in order.
    """
    # one tree level per bit of the code position within a word (4 bits: 8 codes) or a
    # 3-word chunk (3 bits: 32 codes); the lowest bit is split off here
    if BITS == 4:
        a, sa = _tree2(w0, w1, w2, Centroids, BITS, 0, 2)
        b, sb = _tree2(w0, w1, w2, Centroids, BITS, 1, 2)
    else:
        a, sa = _tree4(w0, w1, w2, Centroids, BITS, 0, 2)
        b, sb = _tree4(w0, w1, w2, Centroids, BITS, 1, 2)
    return tl.join(a, b).reshape(T, D), tl.sum(sa + sb, axis=1)
