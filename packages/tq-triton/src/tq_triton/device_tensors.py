"""Tensors the kernels read, cached per device: codebook tables and a placeholder pointer."""

from __future__ import annotations

import functools

import torch

from tq_core import Preset, key_codebook

from .key_lut import lut_words


@functools.cache
def codebook(preset: Preset, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(centroids float32, boundaries float32, centroids float16) on ``device``, scaled by 1/sqrt(head_dim).

    The attention kernels multiply keys in fp16, so they read the fp16 table directly.
    """
    cent, bounds = key_codebook(preset, head_dim, "cpu")
    return cent.to(device), bounds.to(device), cent.to(torch.float16).to(device)


@functools.cache
def dummy(device: torch.device) -> torch.Tensor:
    """A placeholder pointer argument for kernels specialised not to read it."""
    return torch.zeros(1, dtype=torch.float32, device=device)


@functools.cache
def lut_table(preset: Preset, head_dim: int, device: torch.device) -> torch.Tensor:
    """The register table of the fp16 codebook (``key_lut.lut_words``) on ``device``."""
    return lut_words(codebook(preset, head_dim, torch.device("cpu"))[2]).to(device)
