"""Fast Walsh-Hadamard transform (Sylvester order), orthonormal, batched over the last dim."""

from __future__ import annotations

import math

import torch

from .errors import ShapeError


def _check_pow2(d: int) -> None:
    if d < 1 or d & (d - 1):
        raise ShapeError(f"last dim={d}: the Hadamard transform needs a power of two")


def hadamard_matrix(d: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The orthonormal Sylvester Hadamard matrix ``H[i, j] = (-1)^popcount(i & j) / sqrt(d)``."""
    _check_pow2(d)
    i = torch.arange(d)
    bits = i[:, None] & i[None, :]
    parity = torch.zeros_like(bits)
    while bool(bits.any()):
        parity ^= bits & 1
        bits = bits >> 1
    return ((1 - 2 * parity).to(torch.float64) / math.sqrt(d)).to(dtype)


def random_signs(d: int, seed: int, device: torch.device | str | None = None) -> torch.Tensor:
    """A reproducible ±1 vector of length ``d`` (float32)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 2, (d,), generator=g).to(torch.float32) * 2 - 1
    return s.to(device) if device is not None else s


def fwht(x: torch.Tensor, signs: torch.Tensor | None = None) -> torch.Tensor:
    """``H @ (signs * x)`` along the last dim with H orthonormal, in O(d log d).

    Works for any power-of-two ``d`` and any leading batch shape; computes in the input's
    floating dtype (float32 or float64 recommended). Without ``signs`` the transform is
    its own inverse; with them, :func:`ifwht` inverts it.
    """
    d = x.shape[-1]
    _check_pow2(d)
    if signs is not None:
        x = x * signs
    lead = x.shape[:-1]
    y = x.reshape(-1, d)
    # each stage reads y and writes the other of two buffers (no stacking copies, and the
    # input is never written)
    bufs = tuple(torch.empty_like(y, memory_format=torch.contiguous_format) for _ in range(2))
    h, stage = 1, 0
    while h < d:
        # butterflies on index bit log2(h): pairs (i, i + h) inside blocks of 2h
        dst = bufs[stage % 2]
        src4, dst4 = y.reshape(-1, d // (2 * h), 2, h), dst.view(-1, d // (2 * h), 2, h)
        a, b = src4[:, :, 0, :], src4[:, :, 1, :]
        torch.add(a, b, out=dst4[:, :, 0, :])
        torch.sub(a, b, out=dst4[:, :, 1, :])
        y, h, stage = dst, 2 * h, stage + 1
    return (y.reshape(*lead, d) / math.sqrt(d)).to(x.dtype)


def ifwht(y: torch.Tensor, signs: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse of :func:`fwht` with the same ``signs``."""
    x = fwht(y)
    return x * signs if signs is not None else x
