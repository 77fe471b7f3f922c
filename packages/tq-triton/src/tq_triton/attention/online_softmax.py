"""The arithmetic of one attention tile step, written once and compiled by both attention
kernels (``kernel``: Triton; ``gluon_kernel``: Gluon, through ``gluon.jit``). The kernels
differ in how they load, decode and lay out a tile, never in these numbers.

The state of a row is ``(m, l, r)`` and, per program, ``f``; the row's output is
``(f * acc + r) / l`` where ``acc`` is the value product's accumulator:

- **Scores** ``s`` arrive in units of ``q_scale`` (a power of two, see
  ``launch.query_scaling``) and log2: ``s * q_scale`` is the exponent.
- **Lazy running maximum.** ``m`` moves only when a tile's maximum exceeds it by more than
  ``MAX_SLACK`` (8, log2 units), so a probability stays below ``2^8``, well inside fp16;
  where ``m`` does not move, the rescale factor is exactly 1.
- **Value codes** enter the product as the fp16 number ``code - 2^(VBITS - 1)`` (exact), so
  ``value = zero + scale * (code - 2^(VBITS-1)) + scale * 2^(VBITS-1)``: the scales are folded
  into the probabilities, which become fp16 weights ``p * scale / f``, and the rest
  (``zero + scale * 2^(VBITS-1)``, :func:`value_mid_fn`) into the row sum ``r``.
- **Lazy scale reference.** ``f`` moves only when a tile's largest value scale leaves
  ``[f / SCALE_SLACK, f]`` (16), so the fp16 weights stay in ``[2^-4, 1] * p``.
- **Accumulation.** The accumulator is rescaled by ``alpha * f_old / f`` per row, inside the
  matrix product (``acc = w @ v + acc * factor``): centred codes keep it free of an offset
  that ``r`` would cancel only at the end, which matters because the matrix unit
  truncates as it accumulates.
- **NaN.** A NaN score or value makes its row's ``l`` or ``r`` NaN, and the row's output
  NaN (no maximum or comparison turns it into a number); a non-finite query element makes
  its row NaN through :func:`output_factors_fn` (docs/overview.md, "Non-finite inputs").

Plain functions of ``triton.language`` operations only, so that Triton and Gluon compile
the same code (``*_fn``: compile with ``triton.jit`` or ``gluon.jit``).
"""

from __future__ import annotations

import triton
import triton.language as tl

# documented here, written as literals in the functions (a jit function reads no globals
# that both Triton and Gluon accept): the lazy maximum's slack in log2 units, and the
# scale reference's in a factor
MAX_SLACK = 8.0
SCALE_SLACK = 16.0


def value_mid_fn(zero, scale, VBITS: tl.constexpr):
    """What the centred value code leaves for the row sum: ``zero + scale * 2^(VBITS-1)``
    (float32 ``[T]``)."""
    return zero.to(tl.float32) + scale.to(tl.float32) * (1 << (VBITS - 1))


def tile_step_fn(s, q_scale, m_i, l_i, f_i, vscale):
    """Fold one tile's scores into a row state: ``s`` float32 ``[M, T]`` (-inf where a row
    may not see a position), ``vscale`` the tile's float32 value scales ``[T]``. Returns
    ``(m, l, f, w, factor, p, alpha)``: the new maximum, sum and scale reference, the fp16
    weights ``w`` ``[M, T]`` of the value product and the accumulator's factor per row
    ``[M]`` (``acc = w @ codes + acc * factor``), and the probabilities and rescale factor
    that :func:`row_sum_fn` takes once the product is issued (in that order the portable
    kernel's one-warp decode keeps fewer registers live across the product)."""
    tile_max = tl.max(s, axis=1) * q_scale
    m_new = tl.where(tile_max > m_i + 8.0, tile_max, m_i)
    # a row that has seen nothing keeps m = -inf: shift by 0, not inf - inf
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.where(m_new == m_i, 1.0, tl.exp2(m_i - m_ref))
    p = tl.exp2(s * q_scale - m_ref[:, None])
    l_new = l_i * alpha + tl.sum(p, axis=1)
    smax = tl.max(vscale, axis=0)
    f = tl.where((smax > f_i) | (smax * 16.0 < f_i), smax, f_i)
    f = tl.where(f > 0, f, 1.0)
    # one reciprocal per tile, not a division per position
    w = (p * (vscale * (1.0 / f))[None, :]).to(tl.float16)
    return m_new, l_new, f, w, alpha * (f_i / f), p, alpha


def row_sum_fn(r_i, alpha, p, mid):
    """The row sum ``r`` after a tile: rescaled by ``alpha`` and plus ``p @ mid``
    (:func:`value_mid_fn` ``[T]``)."""
    return r_i * alpha + tl.sum(p * mid[None, :], axis=1)


def output_factors_fn(l_i, r_i, f_i, q_bad):
    """``(a, b)`` per row with output ``acc * a + b``: ``f / l`` and ``r / l`` (a row that
    saw nothing divides by 1), NaN for a row whose query holds a NaN or ±inf (``q_bad``):
    -inf times keys of one sign can make every score -inf, and that row would otherwise come
    out as 0."""
    inv_l = tl.where(q_bad, float("nan"), 1.0 / tl.where(l_i > 0, l_i, 1.0))
    return f_i * inv_l, r_i * inv_l


def row_lse_fn(m_i, l_i, q_bad, SKIP_EMPTY: tl.constexpr):
    """A row's log2-sum-exp for the split merge (-inf: saw nothing). With ``SKIP_EMPTY`` (the
    merge skips -inf splits without reading them) a non-finite query's row, or a row whose
    sum is NaN (a NaN read from the cache), keeps a finite weight, so that its NaN partial
    output reaches the merge."""
    lse = tl.where(l_i > 0, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
    if SKIP_EMPTY:
        lse = tl.where(q_bad | (l_i != l_i), 0.0, lse)
    return lse


def nonfinite_rows_fn(q):
    """Rows of float32 ``q`` ``[M, D]`` that hold a NaN or ±inf."""
    return tl.sum(((q != q) | (tl.abs(q) == float("inf"))).to(tl.int32), axis=1) > 0


def saturate_fn(q):
    """Finite elements clamped to fp16's ±65504, NaN and ±inf kept: what a round-toward-zero
    cast to fp16 does by itself on NVIDIA GPUs (IEEE 754 overflow under that rounding)."""
    q_sat = tl.minimum(tl.maximum(q, -65504.0), 65504.0)
    return tl.where(tl.abs(q) < float("inf"), q_sat, q)


value_mid = triton.jit(value_mid_fn)
tile_step = triton.jit(tile_step_fn)
row_sum = triton.jit(row_sum_fn)
output_factors = triton.jit(output_factors_fn)
row_lse = triton.jit(row_lse_fn)
nonfinite_rows = triton.jit(nonfinite_rows_fn)
saturate = triton.jit(saturate_fn)
