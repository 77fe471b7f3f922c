"""3-bit codebook keys decoded by a polynomial in fp16 arithmetic, two codes per operation.

A 3-bit Lloyd-Max codebook is odd-symmetric: centroid ``7 - c`` is ``-centroid[c]``. With
``t = (c - 3.5) / 4``, centroid ``c`` is an odd polynomial of degree 7
in ``t``, ``t (a1 + a3 t^2 + a5 t^4 + a7 t^6)``, whose four coefficients interpolate the
four positive centroids. :func:`poly_coefficients` searches fp16 coefficients near the
real interpolant for which Horner's rule in fp16 gives every centroid **bit for bit**,
whichever way a compiler or device evaluates it: each multiply-add fused or rounded twice,
or the whole polynomial in float32 and rounded once. So the decoded keys are the codebook's
fp16 values, as the register table (``key_lut``) gives them, on every backend.

Each thread holds two codes per 32-bit word (16 bits apart, ``0x6400 | (code << 1)`` is the
fp16 number ``1024 + 2 code``, from which one multiply-add gives ``t`` exactly). Each code
is shifted straight from the chunk's bit stream into its half: one shift, two for a code
that straddles two words, then one mask-and-or per pair (:func:`_pair_direct`). The
polynomial then runs on fp16 pairs: about 4 operations per code, where the register table's
byte picks cost about 9 in plain Triton. The pairs put position ``4G + k + 16h`` of each
32-code chunk at column ``8G + 2k + h`` (:func:`key_columns`); the query is permuted into
that order once per program (:func:`query_in_key_order`), which leaves every score
unchanged.

tq_k4v3's values are 3-bit Lloyd-Max codes in the same chunk layout, so :func:`poly_keys`
decodes them too; the value product's columns then come out in the same order, and the
accumulator is put back in head_dim order once per program, before the rotation back
(:func:`columns_in_head_order`).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import torch
import triton
import triton.language as tl

from .bitpack import fp16_halves, join4

# the polynomial's variable is s (c - 3.5) with s = 1/4, which keeps every coefficient a
# normal fp16 number for tq's codebooks (head_dim 64 to 512). The kernel takes s and -3.5 s
# as literals and reads only a1 .. a7 from memory: with every constant loaded, Triton 3.9
# compiles the pairs' arithmetic to scalar fp16 operations and repacks them (about a fifth
# more instructions per token statically at head_dim 128), which Triton 3.6 does not
POLY_SCALE = tl.constexpr(0.25)
POLY_OFFSET = tl.constexpr(-3.5 * 0.25)
# the kernel forms t in one multiply-add from the fp16 number 1024 + 2 c (code c placed at
# bit 1 of a half, under 0x6400): (1024 + 2 c) / 8 = 128 + c / 4 is exact in fp16 (a step of
# 1/8 there), and so are -128.875 and the sum c / 4 - 0.875, fused or not
PAIR_SCALE = tl.constexpr(0.125)
PAIR_OFFSET = tl.constexpr(-3.5 * 0.25 - 1024 * 0.125)
# how far from the real interpolant's coefficients (in fp16 steps) the search looks
_RADIUS = 6


def _r16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def _evaluations(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Horner's rule for each coefficient row ``[a1, a3, a5, a7]`` of ``coef`` ``[N, 4]`` at
    each ``t`` ``[P]``, as every evaluation order the kernel may be compiled to computes it:
    each of the three multiply-adds fused (one rounding; the product of two fp16 numbers is
    exact in float32) or not, and the whole in float32 with one rounding at the end.
    Returns ``[9, N, P]`` fp16 results as float32."""
    t = t[None, :]
    t2 = _r16(t * t)
    outs = []
    for fused in itertools.product((False, True), repeat=3):
        u = coef[:, 3:4] + 0 * t
        for step, i in enumerate((2, 1, 0)):
            a = coef[:, i : i + 1]
            u = _r16(u * t2 + a) if fused[step] else _r16(_r16(u * t2) + a)
        outs.append(_r16(u * t))
    u = coef[:, 3:4] + 0 * t
    for i in (2, 1, 0):
        u = u * (t * t) + coef[:, i : i + 1]
    outs.append(_r16(u * t))
    return np.stack(outs)


@functools.cache
def _search(cent_bits: bytes) -> tuple[float, ...] | None:
    cent = np.frombuffer(cent_bits, dtype=np.float16)
    want = cent.astype(np.float32)
    s = POLY_SCALE.value
    t = ((np.arange(8) - 3.5) * s).astype(np.float32)
    vander = np.stack([t[4:].astype(np.float64) ** (2 * i + 1) for i in range(4)], 1)
    real = np.linalg.solve(vander, cent[4:].astype(np.float64))
    bits = real.astype(np.float16).view(np.uint16).astype(np.int64)
    offsets = np.array(list(itertools.product(range(-_RADIUS, _RADIUS + 1), repeat=4)))
    near = np.abs(offsets).sum(axis=1).argsort(kind="stable")
    offsets = offsets[near]
    coef = (bits[None, :] + offsets).astype(np.uint16).view(np.float16).astype(np.float32)
    exact = (_evaluations(coef, t) == want[None, None, :]).all(axis=(0, 2))
    normal = (np.abs(coef) >= 2.0**-14).all(axis=1) & np.isfinite(coef).all(axis=1)
    found = np.nonzero(exact & normal)[0]
    if not len(found):
        return None
    a = coef[found[0]]
    return (float(a[0]), float(a[1]), float(a[2]), float(a[3]))


def poly_coefficients(centroids_fp16: torch.Tensor) -> torch.Tensor | None:
    """The fp16 coefficients ``[a1, a3, a5, a7]`` of the polynomial in ``t = POLY_SCALE * c +
    POLY_OFFSET`` that decode the 8-entry codebook ``centroids_fp16`` bit for bit (see the
    module's docstring), or None where the codebook is not odd-symmetric or no such
    coefficients lie near the interpolant."""
    if centroids_fp16.dtype != torch.float16 or centroids_fp16.numel() != 8:
        got = f"{centroids_fp16.dtype} {tuple(centroids_fp16.shape)}"
        raise ValueError(f"poly_coefficients: expected 8 fp16 centroids, got {got}")
    cent = centroids_fp16.detach().cpu().reshape(8)
    if not torch.equal(cent, -cent.flip(0)) or not bool((cent[4:] > 0).all()):
        return None
    found = _search(cent.numpy().tobytes())
    return None if found is None else torch.tensor(found, dtype=torch.float16)


def key_columns(d: torch.Tensor) -> torch.Tensor:
    """The head_dim index that column ``d`` of a decoded key tile holds: column
    ``32 ch + 8 G + 2 k + h`` holds position ``32 ch + 4 G + k + 16 h``."""
    ch, f = d // 32, d % 32
    g, k, h = f // 8, (f // 2) % 4, f % 2
    return 32 * ch + 4 * g + k + 16 * h


@triton.jit
def query_in_key_order(q, M: tl.constexpr, D: tl.constexpr):
    """The query ``[M, D]`` with its columns in :func:`key_columns`' order."""
    return tl.permute(q.reshape(M, D // 32, 2, 4, 4), (0, 1, 3, 4, 2)).reshape(M, D)


@triton.jit
def columns_in_head_order(x, M: tl.constexpr, D: tl.constexpr):
    """The inverse of :func:`query_in_key_order`: ``x`` ``[M, D]`` whose column ``c`` holds
    head_dim index :func:`key_columns` ``(c)``, with its columns in head_dim order."""
    return tl.permute(x.reshape(M, D // 32, 4, 4, 2), (0, 1, 4, 2, 3)).reshape(M, D)


@triton.jit
def _code_bits(w0, w1, w2, P: tl.constexpr, DST: tl.constexpr):
    """Stream bits ``P .. P+2`` of a 3-bit chunk (words ``w0, w1, w2``, uint32) at bits
    ``DST .. DST+2``; the other bits are not cleared. A code that straddles two words takes
    the second word's bits with one more shift."""
    W: tl.constexpr = P // 32
    B: tl.constexpr = P % 32
    if W == 0:
        a = w0
        b = w1
    elif W == 1:
        a = w1
        b = w2
    else:
        a = w2
        b = w2
    if B >= DST:
        x = a >> (B - DST)
    else:
        x = a << (DST - B)
    if B > 29:
        x = x | (b << (32 - B + DST))
    return x


@triton.jit
def _pair_direct(w0, w1, w2, G: tl.constexpr, K: tl.constexpr):
    """Codes ``4G + K`` (low half) and ``4G + K + 16`` (high half) of a chunk as the fp16 pair
    ``1024 + 2 code``, each code moved straight from the stream to bit 1 of its half."""
    J: tl.constexpr = 4 * G + K
    lo = _code_bits(w0, w1, w2, 3 * J, 1) & 0x0000000E
    hi = _code_bits(w0, w1, w2, 3 * J + 48, 17) & 0x000E0000
    return (lo | hi) | 0x64006400


@triton.jit
def _pairs_of_k(w0, w1, w2, K: tl.constexpr):
    return join4(
        _pair_direct(w0, w1, w2, 0, K),
        _pair_direct(w0, w1, w2, 1, K),
        _pair_direct(w0, w1, w2, 2, K),
        _pair_direct(w0, w1, w2, 3, K),
    )


@triton.jit
def poly_keys(w0, w1, w2, Coef, T: tl.constexpr, D: tl.constexpr):
    """fp16 centroids ``[T, D]`` of a 3-bit key (or value) tile in :func:`key_columns`' order, and
    each token's squared centroid norm ``[T]`` (float32, as ``key_lut.lut_keys`` sums it).
    ``w0, w1, w2``: the chunk words ``[T, D // 32]`` (uint32); ``Coef``: fp16 pointer to
    :func:`poly_coefficients`' ``a1 .. a7`` (the variable's scale and offset are
    :data:`POLY_SCALE` and :data:`POLY_OFFSET`)."""
    s = tl.full((), PAIR_SCALE, tl.float16)
    b = tl.full((), PAIR_OFFSET, tl.float16)
    a1 = tl.load(Coef)
    a3 = tl.load(Coef + 1)
    a5 = tl.load(Coef + 2)
    a7 = tl.load(Coef + 3)
    # [T, D // 32, 2, 2]: group pairs G = 0..3 in order, then each pair's codes k = 0..3
    x = join4(
        _pairs_of_k(w0, w1, w2, 0), _pairs_of_k(w0, w1, w2, 1), _pairs_of_k(w0, w1, w2, 2), _pairs_of_k(w0, w1, w2, 3)
    )
    # each word's halves, low first: column 8 G + 2 k + h
    # t = POLY_SCALE * code + POLY_OFFSET, exactly (see PAIR_SCALE)
    t = fp16_halves(x).reshape(T, D) * s + b
    t2 = t * t
    k16 = ((a7 * t2 + a5) * t2 + a3) * t2 + a1
    k16 = k16 * t
    kf = k16.to(tl.float32)
    return k16, tl.sum(kf * kf, axis=1)
