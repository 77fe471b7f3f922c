"""Scratch buffers for split-KV partial results, kept between calls.

Launchers must not allocate per call (CUDA-graph capture, allocator churn), so the
buffers grow to the largest request seen on each device and are then reused.
"""

from __future__ import annotations

import torch

_BUFFERS: dict[tuple[torch.device, str], torch.Tensor] = {}


def buffer(device: torch.device, name: str, numel: int) -> torch.Tensor:
    """A float32 buffer of at least ``numel`` elements (contents undefined)."""
    key = (device, name)
    buf = _BUFFERS.get(key)
    if buf is None or buf.numel() < numel:
        # grow geometrically so that slowly rising batch sizes do not reallocate each call
        size = max(numel, 0 if buf is None else 2 * buf.numel())
        buf = torch.empty(size, dtype=torch.float32, device=device)
        _BUFFERS[key] = buf
    return buf[:numel]
