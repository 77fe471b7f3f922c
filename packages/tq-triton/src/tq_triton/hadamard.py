"""Triton helpers: the Walsh-Hadamard transform of tile rows, by butterflies in registers
(:func:`fwht_rows`) or as a product with the Hadamard matrix on the matrix units
(:func:`fwht_rows_dot`)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def fwht_rows(x, T: tl.constexpr, D: tl.constexpr, LOG2_D: tl.constexpr):
    """Unnormalised Sylvester Hadamard of each row of float32 ``x`` ``[T, D]``. Each output
    element sums ``D`` inputs, so callers scale ``x`` first (by ``1/sqrt(D)`` for the
    orthonormal transform, or less) or bound it (the store rotates only keys whose sum of
    squares is finite): then no finite input overflows."""
    for stage in tl.static_range(LOG2_D):
        # pairs (i, i + h) inside blocks of 2h, h = 2**stage: view the row as [block, half, k]
        y = tl.permute(x.reshape(T, D >> (stage + 1), 2, 1 << stage), (0, 1, 3, 2))
        a, b = tl.split(y)
        y = tl.join(a + b, a - b)
        x = tl.permute(y, (0, 1, 3, 2)).reshape(T, D)
    return x


@triton.jit
def fwht_rows_dot(
    x,
    Hmat,
    scale,
    T: tl.constexpr,
    D: tl.constexpr,
    M: tl.constexpr,
    LOG2_C: tl.constexpr,
    PARTS: tl.constexpr,
):
    """:func:`fwht_rows` of float32 ``x`` ``[T, D]`` times ``scale`` (``[T]``, powers of two that
    bring each row's largest element below 2**15), with the matrix units.

    ``Hmat``: the unnormalised Sylvester Hadamard matrix of order ``M`` (a power of two,
    16 <= ``M`` <= ``D``) as float16, row-major; it is its own transpose. ``H_D = H_C kron
    H_M`` with ``C = D / M = 2**LOG2_C``: every ``M``-long chunk of a row is multiplied by
    ``Hmat`` (the chunks are stacked chunk-major, ``C * T`` rows), then the ``C`` chunks of
    each row are combined by butterflies. The scaled row is split exactly into ``PARTS``
    float16 parts (1: the row is float16 after scaling, as bfloat16 and float16 inputs are;
    2: 22 bits of the float32 mantissa), so every product with the +-1 entries is exact
    and only the float32 accumulation rounds, in whatever order the hardware adds."""
    C: tl.constexpr = D // M
    xs = x * scale[:, None]
    if C > 1:
        xs = tl.permute(xs.reshape(T, C, M), (1, 0, 2))
    xs = xs.reshape(C * T, M)
    h = tl.arange(0, M)
    hm = tl.load(Hmat + h[:, None] * M + h[None, :])
    hi = xs.to(tl.float16)
    if PARTS == 1:
        y = tl.dot(hi, hm, out_dtype=tl.float32)
    else:
        lo = (xs - hi.to(tl.float32)).to(tl.float16)
        y = tl.dot(lo, hm, out_dtype=tl.float32)
        y = tl.dot(hi, hm, y)
    if C > 1:
        y = tl.permute(y.reshape(C, T * M), (1, 0))
        y = fwht_rows(y, T * M, C, LOG2_C)
        y = tl.permute(y.reshape(T, M, C), (0, 2, 1))
    return y.reshape(T, D)
