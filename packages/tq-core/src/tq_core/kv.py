"""``encode_kv`` / ``decode_kv``: the codec on vLLM's per-slot format."""

from __future__ import annotations

import torch

from .checks import check_encode_args, check_tensor
from .codec import decode_fields, encode_fields, fields_to_slots, slots_to_fields
from .errors import ShapeError
from .presets import Preset, get_preset


def encode_kv(key: torch.Tensor, value: torch.Tensor, preset: str | Preset) -> torch.Tensor:
    """Encode ``key``/``value`` ``[N, H, d]`` into vLLM slots: uint8 ``[N, H, slot_size_aligned]``."""
    p = check_encode_args(key, value, preset)
    return fields_to_slots(encode_fields(key, value, p), p, key.shape[-1])


def decode_kv(slots: torch.Tensor, preset: str | Preset, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode vLLM slots ``[N, H, slot_size_aligned]`` to float32 ``(key, value)`` ``[N, H, d]``.

    These are exactly the keys and values attention uses (norm correction included).
    """
    p = get_preset(preset)
    p.check_head_dim(head_dim)
    check_tensor(slots, "slots", ndim=3, dtypes=(torch.uint8,))
    expected = p.layout(head_dim).slot_size_aligned
    if slots.shape[-1] != expected:
        raise ShapeError(
            f"slots: last dim {slots.shape[-1]}, expected slot_size_aligned={expected} "
            f"for {p.name} at head_dim={head_dim}"
        )
    return decode_fields(slots_to_fields(slots, p, head_dim), p, head_dim)
