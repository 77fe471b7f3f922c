"""``encode_kv`` / ``decode_kv``: the codec on vLLM's per-slot format."""

from __future__ import annotations

import torch

from .calibration import LayerCalibration
from .checks import check_calibrated_tokens, check_encode_args, check_tensor
from .codec import decode_fields, encode_fields, fields_to_slots, slots_to_fields
from .errors import ShapeError
from .presets import Preset, get_preset


def encode_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    preset: str | Preset,
    calibration: LayerCalibration | None = None,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Encode ``key``/``value`` ``[N, H, d]`` into vLLM slots: uint8 ``[N, H, slot_size_aligned]``.

    A calibrated preset needs the layer's ``calibration`` and the tokens' ``positions``
    ``[N]`` in their sequences (as :func:`tq_core.store`)."""
    p = check_encode_args(key, value, preset)
    n, h, d = key.shape
    pos = check_calibrated_tokens(p, calibration, positions, n, h, d, key.device)
    first = None if pos is None else pos == 0
    return fields_to_slots(encode_fields(key, value, p, calibration, first), p, d)


def decode_kv(
    slots: torch.Tensor,
    preset: str | Preset,
    head_dim: int,
    calibration: LayerCalibration | None = None,
    positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode vLLM slots ``[N, H, slot_size_aligned]`` to float32 ``(key, value)`` ``[N, H, d]``.

    These are exactly the keys and values attention uses (norm correction included). A
    calibrated preset decodes with the layer's ``calibration`` and the ``positions`` it was
    encoded with to the model's keys and values, or without a calibration to the coded
    vectors.
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
    first = None
    if calibration is not None:  # none: the coded vectors
        pos = check_calibrated_tokens(p, calibration, positions, slots.shape[0], slots.shape[1], head_dim, slots.device)
        first = None if pos is None else pos == 0
    return decode_fields(slots_to_fields(slots, p, head_dim), p, head_dim, calibration=calibration, first=first)
