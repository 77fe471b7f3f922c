"""Triton helper: the Walsh-Hadamard transform of tile rows, by butterflies in registers
(:func:`fwht_rows`)."""

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
