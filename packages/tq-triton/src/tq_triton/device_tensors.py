"""Tensors the kernels read, cached per device: codebook tables and a placeholder pointer.

The launchers read the cached tensors themselves (the ``cached_*`` functions, no copy on
the launch path). The public accessors return copies, so that a caller who writes into
what it got cannot change later kernels' results.
"""

from __future__ import annotations

import functools

import torch

from tq_core import Preset, key_codebook, value_codebook

from .code_bins import bin_table
from .key_lut import lut_words
from .key_poly import poly_coefficients


@functools.cache
def cached_codebook(
    preset: Preset, head_dim: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tensors :func:`codebook` copies, shared by every launch: for tq-triton's launchers
    only, which never write them."""
    cent, bounds = key_codebook(preset, head_dim, "cpu")
    return cent.to(device), bounds.to(device), cent.to(torch.float16).to(device)


@functools.cache
def cached_value_codebook(
    preset: Preset, head_dim: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The value tables of a calibrated format (``tq_core.value_codebook``: Lloyd-Max centroids
    scaled by 1/sqrt(head_dim), or tq_k4v4's symmetric cell centres), shared by every launch
    (launchers only): (boundaries float32, centroids float16, centroids float32)."""
    cent, bounds = value_codebook(preset, head_dim, "cpu")
    return bounds.to(device), cent.to(torch.float16).to(device), cent.to(device)


@functools.cache
def cached_bins(preset: Preset, head_dim: int, device: torch.device, which: str) -> torch.Tensor | None:
    """``code_bins.bin_table`` of the ``"key"`` or ``"value"`` (calibrated Lloyd-Max values)
    boundaries on ``device``, shared by every launch (launchers only); None where the
    codebook has no such table."""
    if which == "key":
        bounds = cached_codebook(preset, head_dim, torch.device("cpu"))[1]
    else:
        bounds = cached_value_codebook(preset, head_dim, torch.device("cpu"))[0]
    table = bin_table(bounds)
    return None if table is None else table.to(device)


def codebook(preset: Preset, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(centroids float32, boundaries float32, centroids float16) on ``device``, scaled by 1/sqrt(head_dim).

    The attention kernels multiply keys in fp16, so they read the fp16 table directly. New
    tensors on every call (copies of the kernels' cached ones).
    """
    return tuple(t.clone() for t in cached_codebook(preset, head_dim, device))  # type: ignore[return-value]


@functools.cache
def dummy(device: torch.device) -> torch.Tensor:
    """A placeholder pointer argument for kernels specialised not to read it."""
    return torch.zeros(1, dtype=torch.float32, device=device)


@functools.cache
def cached_lut_table(preset: Preset, head_dim: int, device: torch.device) -> torch.Tensor:
    """The tensor :func:`lut_table` copies, shared by every launch (launchers only)."""
    return lut_words(cached_codebook(preset, head_dim, torch.device("cpu"))[2]).to(device)


@functools.cache
def cached_value_lut_table(preset: Preset, head_dim: int, device: torch.device) -> torch.Tensor:
    """The register table of a calibrated format's 3- or 4-bit value codebook
    (``key_lut.lut_words``), shared by every launch (launchers only)."""
    return lut_words(cached_value_codebook(preset, head_dim, torch.device("cpu"))[1]).to(device)


@functools.cache
def cached_poly_coefficients(preset: Preset, head_dim: int, device: torch.device) -> torch.Tensor | None:
    """``key_poly.poly_coefficients`` of a 3-bit key codebook on ``device`` (None: the
    codebook has none), shared by every launch (launchers only)."""
    if preset.key_is_fp8 or preset.key_bits != 3:
        return None
    coef = poly_coefficients(cached_codebook(preset, head_dim, torch.device("cpu"))[2])
    return None if coef is None else coef.to(device)


@functools.cache
def cached_poly_value_coefficients(preset: Preset, head_dim: int, device: torch.device) -> torch.Tensor | None:
    """:func:`cached_poly_coefficients` of a calibrated format's 3-bit Lloyd-Max value codebook
    (tq_k4v3; None for other values)."""
    if not preset.calibrated or preset.value_kind != "lloyd_max" or preset.value_bits != 3:
        return None
    coef = poly_coefficients(cached_value_codebook(preset, head_dim, torch.device("cpu"))[1])
    return None if coef is None else coef.to(device)


def lut_table(preset: Preset, head_dim: int, device: torch.device) -> torch.Tensor:
    """The register table of the fp16 codebook (``key_lut.lut_words``) on ``device``: a new
    tensor on every call."""
    return cached_lut_table(preset, head_dim, device).clone()
