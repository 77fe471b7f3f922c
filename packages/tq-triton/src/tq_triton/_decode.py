"""Triton helper: codebook keys decoded where the packed words are, with their centroid norms.

A key tile's codes are gathered from the fp16 codebook one code position at a time on
the words as loaded (``[T, W]``, each thread holding whole words), and a ``tl.join``
tree assembles the ``[T, D]`` operand, as ``_bits.unpack`` does for codes. The squared
centroid norm that norm correction needs is summed in the same tree, inside each
thread. Summing it on the assembled tile instead, where ``D`` is spread over lanes,
cost shuffles and replicated divisions per token: on an H200 (Triton 3.6) this change
took decode-32k from 2.25 ms to 1.97 ms for turboquant_k3v4_nc (docs/perf/h200.md).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._bits import _code3


@triton.jit
def _cent(Centroids, code):
    c = tl.load(Centroids + code)
    cf = c.to(tl.float32)
    return c, cf * cf


@triton.jit
def _c3_1(w0, w1, w2, Centroids, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _cent(Centroids, _code3(w0, w1, w2, J))
    b, sb = _cent(Centroids, _code3(w0, w1, w2, J + STEP))
    return tl.join(a, b), sa + sb


@triton.jit
def _c3_2(w0, w1, w2, Centroids, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _c3_1(w0, w1, w2, Centroids, J, 2 * STEP)
    b, sb = _c3_1(w0, w1, w2, Centroids, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _c3_3(w0, w1, w2, Centroids, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _c3_2(w0, w1, w2, Centroids, J, 2 * STEP)
    b, sb = _c3_2(w0, w1, w2, Centroids, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _c3_4(w0, w1, w2, Centroids, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _c3_3(w0, w1, w2, Centroids, J, 2 * STEP)
    b, sb = _c3_3(w0, w1, w2, Centroids, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def _c4_1(w, Centroids, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _cent(Centroids, (w >> (4 * J)) & 15)
    b, sb = _cent(Centroids, (w >> (4 * (J + STEP))) & 15)
    return tl.join(a, b), sa + sb


@triton.jit
def _c4_2(w, Centroids, J: tl.constexpr, STEP: tl.constexpr):
    a, sa = _c4_1(w, Centroids, J, 2 * STEP)
    b, sb = _c4_1(w, Centroids, J + STEP, 2 * STEP)
    return tl.join(a, b), sa + sb


@triton.jit
def codebook_keys(w0, w1, w2, Centroids, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr):
    """fp16 centroids ``[T, D]`` of a key tile and each token's squared centroid norm ``[T]``.

    ``w0, w1, w2``: the words from ``_bits.load_words`` (3 bits: chunk words
    ``[T, D // 32]``; 4 bits: ``w0`` = ``[T, D // 8]``). ``Centroids``: the fp16 codebook.
    The join trees mirror ``_bits.unpack3`` / ``unpack4``, so positions come out in order.
    """
    if BITS == 4:
        a, sa = _c4_2(w0, Centroids, 0, 2)
        b, sb = _c4_2(w0, Centroids, 1, 2)
    else:
        a, sa = _c3_4(w0, w1, w2, Centroids, 0, 2)
        b, sb = _c3_4(w0, w1, w2, Centroids, 1, 2)
    return tl.join(a, b).reshape(T, D), tl.sum(sa + sb, axis=1)
