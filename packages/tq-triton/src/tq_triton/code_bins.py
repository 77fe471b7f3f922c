"""Codebook codes by uniform bins: a table lookup instead of a search over the boundaries.

A code is the number of a codebook's ascending boundaries that are ``<=`` the coordinate
``u`` (vLLM's rule). The search the store otherwise runs costs one comparison per code bit
and a tree of selects (about 22 instructions per 4-bit coordinate on sm_90). Here the line
is cut into bins of equal width, narrower than the smallest gap between two boundaries, so
that each bin holds at most one boundary. A coordinate's bin, ``trunc(u * scale +
offset)``, gives the number of boundaries below the bin and the one boundary inside it (or
NaN, which no coordinate is ``>=``); one comparison against that boundary finishes the
count. It is the same float32 ``u >= b`` as the search makes, so the codes are the same,
ties included.

The bin index is rounded, so a coordinate within a rounding error of a bin edge may land in
the neighbouring bin: :func:`bin_table` places the edges so that every boundary sits at
least :data:`EDGE_MARGIN` of a bin away from one, where landing in either bin counts the
same boundaries. It checks the table against the search on every boundary and its float32
neighbours before returning it, and returns ``None`` (the caller searches instead) for a
codebook that would need more than ``max_bins`` bins.

Table (int64, ``[2 + bins]``): entry 0 holds ``scale`` (low 32 bits) and ``offset`` (high
32 bits) as float32 bit patterns, entry 1 the last bin's index, entry ``2 + k`` bin ``k``'s
count of boundaries below it (low 32 bits) and its inner boundary's float32 bits (high).
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

# the least distance, in bins, between a boundary and a bin edge: far above the rounding
# error of ``u * scale + offset`` (about 1e-5 bins for tables of at most a few hundred bins)
EDGE_MARGIN = 1 / 64
# bins are this fraction of the smallest gap between boundaries
WIDTH_OF_GAP = 0.75


def _words(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """int64 words of two 32-bit patterns each (uint32 arrays): ``low`` in bits 0-31,
    ``high`` in bits 32-63 (a negative float32 in ``high`` makes a negative word)."""
    return ((high.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64)).view(np.int64)


def _codes_by_bins(
    u: np.ndarray, scale: np.float32, offset: np.float32, base: np.ndarray, inner: np.ndarray, fused: bool
) -> np.ndarray:
    """The kernel's arithmetic in numpy float32: ``u * scale + offset`` rounded once
    (``fused``, a GPU's multiply-add) or after each step (the interpreter)."""
    if fused:
        v = (u.astype(np.float64) * float(scale) + float(offset)).astype(np.float32)
    else:
        v = u * scale + offset
    v = np.minimum(np.fmax(v, np.float32(0)), np.float32(len(base) - 1))
    k = v.astype(np.int64)
    return base[k] + (u >= inner[k])


def bin_table(bounds: torch.Tensor, max_bins: int = 256) -> torch.Tensor | None:
    """The bins of the ascending float32 ``bounds`` (module docstring) as an int64 CPU
    tensor, or ``None`` where they need more than ``max_bins`` bins, two boundaries are
    equal or not finite, or the check against the search fails."""
    b = bounds.detach().to("cpu", torch.float32).numpy().astype(np.float32)
    if b.ndim != 1 or b.size == 0 or not np.all(np.isfinite(b)):
        return None
    gaps = np.diff(b.astype(np.float64))
    if b.size > 1 and not np.all(gaps > 0):
        return None
    span = float(b[-1]) - float(b[0])
    width = WIDTH_OF_GAP * float(gaps.min()) if b.size > 1 else 1.0
    with np.errstate(over="ignore", divide="ignore"):
        scale = np.float32(1.0 / width)
    if not np.isfinite(scale) or not span * float(scale) + 3 <= max_bins:
        return None
    # the offset puts the lowest boundary in bin 1 and keeps every boundary EDGE_MARGIN
    # from an edge: try 64 fractional shifts, take the one farthest from every edge
    best: tuple[float, np.float32] | None = None
    for shift in range(64):
        off = np.float32(1.0 + (shift + 0.5) / 64 - float(b[0]) * float(scale))
        pos = b.astype(np.float64) * float(scale) + float(off)
        frac = pos - np.floor(pos)
        dist = float(np.minimum(frac, 1 - frac).min())
        if best is None or dist > best[0]:
            best = (dist, off)
    assert best is not None
    dist, offset = best
    pos = b.astype(np.float64) * float(scale) + float(offset)
    # bin 0 lies below every boundary, the last bin above them
    bins = int(np.floor(pos.max())) + 2
    if dist < EDGE_MARGIN or pos.min() < 1 or bins > max_bins:
        return None
    idx = np.floor(pos).astype(np.int64)
    base = np.zeros(bins, dtype=np.int64)
    inner = np.full(bins, np.nan, dtype=np.float32)
    for k in range(bins):
        base[k] = int(np.count_nonzero(idx < k))
        here = np.flatnonzero(idx == k)
        if here.size > 1:
            return None
        if here.size == 1:
            inner[k] = b[here[0]]
    # the check: every boundary, its float32 neighbours a few steps out, and points between
    probes = [b]
    for direction in (-np.inf, np.inf):
        x = b.copy()
        for _ in range(4):
            x = np.nextafter(x, np.float32(direction))
            probes.append(x)
    lo, hi = float(b[0]) - 2 * width, float(b[-1]) + 2 * width
    probes.append(np.linspace(lo, hi, 64 * bins + 1, dtype=np.float32))
    probes.append(np.array([0.0, -0.0, -1.0, 1.0, np.inf, -np.inf, np.nan], dtype=np.float32))
    u = np.concatenate(probes).astype(np.float32)
    want = np.searchsorted(b, u, side="right")
    want[np.isnan(u)] = 0
    for fused in (False, True):
        with np.errstate(invalid="ignore"):
            got = _codes_by_bins(u, scale, offset, base, inner, fused)
        if not np.array_equal(got, want):
            return None
    head = _words(np.array([scale], np.float32).view(np.uint32), np.array([offset], np.float32).view(np.uint32))
    entries = _words(base.astype(np.uint32), inner.view(np.uint32))
    table = np.concatenate([head, np.array([bins - 1], np.int64), entries])
    return torch.from_numpy(table)


@triton.jit
def _low_f32(w):
    return w.to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _high_f32(w):
    return (w >> 32).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def codebook_codes_bins(u, Table):
    """Codes (uint32, ``u``'s shape) of the float32 coordinates ``u`` from :func:`bin_table`'s
    ``Table``: the bin's count plus one comparison. The bin index is clamped to the table
    in float32 before the conversion; the clamps return the number for a NaN, so a NaN
    takes bin 0 and code 0, as in the search."""
    head = tl.load(Table)
    last = tl.load(Table + 1).to(tl.float32)
    v = tl.minimum(tl.maximum(u * _low_f32(head) + _high_f32(head), 0.0), last)
    w = tl.load(Table + 2 + v.to(tl.int32))
    return w.to(tl.int32).to(tl.uint32) + (u >= _high_f32(w)).to(tl.uint32)
