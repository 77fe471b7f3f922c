"""Constants the kernels read: codebook tensors (cached per device) and layout constexprs."""

from __future__ import annotations

import functools
import math

import torch

from tq_core import BlockLayout, Preset, key_codebook


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
def layout_constexprs(preset: Preset, lay: BlockLayout) -> dict[str, int | bool]:
    """The compile-time description of a cache block that store and attention kernels share."""
    return {
        "D": lay.head_dim,
        "LOG2_D": int(math.log2(lay.head_dim)),
        "BLOCK_SIZE": lay.block_size,
        "HEAD_STRIDE": lay.head_stride,
        "KEY_OFF": lay.key_offset,
        "KEY_BYTES": lay.key_code_bytes,
        "NORM_OFF": lay.norm_offset or 0,
        "VAL_OFF": lay.value_offset,
        "VAL_BYTES": lay.value_code_bytes,
        "SCALE_OFF": lay.scale_offset,
        "ZERO_OFF": lay.zero_offset,
        "KEY_FP8": preset.key_is_fp8,
        "KBITS": preset.key_bits,
        "VBITS": preset.value_bits,
    }
