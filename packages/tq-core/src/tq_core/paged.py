"""tq's paged cache: field views, the reference ``store``, and vLLM interchange.

The cache tensor has vLLM's shape ``[num_blocks, block_size, num_kv_heads, slot]``;
only the bytes inside each block are arranged differently (see :class:`BlockLayout`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .calibration import LayerCalibration
from .checks import INDEX_DTYPES, check_cache, check_calibration, check_store_args, check_tensor
from .codec import (
    EncodedKV,
    _as_fp16_bytes,
    _from_fp16_bytes,
    decode_fields,
    encode_fields,
    fields_to_slots,
    slots_to_fields,
)
from .errors import RangeError
from .layout import BlockLayout
from .presets import Preset, get_preset


class BlockFields(NamedTuple):
    """Views into a paged cache, each ``[num_blocks, num_kv_heads, block_size, bytes]`` uint8."""

    key: torch.Tensor
    norm: torch.Tensor | None
    value: torch.Tensor
    scale: torch.Tensor  # the uniform step, the Lloyd-Max values' norm or symmetric values' s
    zero: torch.Tensor | None  # None: Lloyd-Max and symmetric values have no zero point


def block_fields(kv_cache: torch.Tensor, lay: BlockLayout) -> BlockFields:
    """Writable views of every field of tq's block arrangement (no copies)."""
    nb = kv_cache.shape[0]
    # the block's bytes are one dense range whatever the logical order of its dims
    flat = torch.as_strided(kv_cache, (nb, lay.block_bytes), (kv_cache.stride(0), 1))
    region = flat.view(nb, lay.num_kv_heads, lay.head_stride)
    b = lay.block_size

    def field(offset: int, width: int) -> torch.Tensor:
        return region[:, :, offset : offset + b * width].view(nb, lay.num_kv_heads, b, width)

    return BlockFields(
        key=field(lay.key_offset, lay.key_code_bytes),
        norm=None if lay.norm_offset is None else field(lay.norm_offset, 2),
        value=field(lay.value_offset, lay.value_code_bytes),
        scale=field(lay.scale_offset, 2),
        zero=None if lay.zero_offset is None else field(lay.zero_offset, 2),
    )


def write_fields(views: BlockFields, blocks: torch.Tensor, offsets: torch.Tensor, enc: EncodedKV) -> None:
    """Write encoded tokens ``enc`` (leading dims ``[n, H]``) at (block, offset) pairs."""
    views.key[blocks, :, offsets] = enc.key_codes
    if views.norm is not None:
        views.norm[blocks, :, offsets] = _as_fp16_bytes(enc.key_norm)
    views.value[blocks, :, offsets] = enc.value_codes
    views.scale[blocks, :, offsets] = _as_fp16_bytes(enc.value_scale)
    if views.zero is not None:
        views.zero[blocks, :, offsets] = _as_fp16_bytes(enc.value_zero)


def read_fields(views: BlockFields, blocks: torch.Tensor, offsets: torch.Tensor) -> EncodedKV:
    """Gather encoded tokens at (block, offset) pairs; result has leading dims ``[n, H]``."""
    return EncodedKV(
        key_codes=views.key[blocks, :, offsets],
        key_norm=None if views.norm is None else _from_fp16_bytes(views.norm[blocks, :, offsets]),
        value_codes=views.value[blocks, :, offsets],
        value_scale=_from_fp16_bytes(views.scale[blocks, :, offsets]),
        value_zero=None if views.zero is None else _from_fp16_bytes(views.zero[blocks, :, offsets]),
    )


def gather_kv(
    kv_cache: torch.Tensor,
    block_row: torch.Tensor,
    length: int,
    preset: str | Preset,
    head_dim: int | None = None,
    rotated: bool = False,
    check_values: bool = True,
    calibration: LayerCalibration | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoded keys and values of one request's first ``length`` cached tokens.

    ``block_row`` is the request's row of the block table (position ``t`` lives in block
    ``block_row[t // block_size]``). Returns float32 ``(key, value)``, each
    ``[length, num_kv_heads, head_dim]``: exactly what attention reads from the cache.
    ``rotated=True`` leaves Lloyd-Max keys in the Hadamard-rotated domain the kernels
    score them in (fp8 keys are never rotated). The block ids of the first
    ``ceil(length / block_size)`` entries must lie in ``[0, num_blocks)``, else
    :class:`RangeError`; that check reads the ids on the host (one synchronisation with
    the cache's device), so callers on a hot path pass ``check_values=debug_enabled()``.
    A calibrated preset decodes with the layer's ``calibration`` to the model's keys and
    values (position 0 is the request's first token), or without one to the coded vectors.
    """
    p = get_preset(preset)
    lay = check_cache(kv_cache, p, head_dim)
    if calibration is not None:
        check_calibration(p, calibration, lay.num_kv_heads, lay.head_dim, kv_cache.device)
    row = check_tensor(block_row, "block_row", ndim=1, dtypes=INDEX_DTYPES, device=kv_cache.device)
    bs = lay.block_size
    if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= row.shape[0] * bs:
        raise RangeError(f"length={length!r}: expected an int in 0..{row.shape[0] * bs} (block_row capacity)")
    used = row[: -(-length // bs)]
    if check_values and used.numel():
        # block ids of the positions read (one host sync: this is the reference path)
        lo, hi = (int(x) for x in torch.aminmax(used))
        nb = kv_cache.shape[0]
        if lo < 0 or hi >= nb:
            raise RangeError(f"block_row: block id {lo if lo < 0 else hi} is outside the cache's {nb} blocks")
    pos = torch.arange(length, device=kv_cache.device)
    blocks = row.long()[pos // bs]
    fields = read_fields(block_fields(kv_cache, lay), blocks, pos % bs)
    return decode_fields(fields, p, lay.head_dim, rotated=rotated, calibration=calibration, first=pos == 0)


def store(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    preset: str | Preset,
    calibration: LayerCalibration | None = None,
    positions: torch.Tensor | None = None,
) -> None:
    """Encode ``key``/``value`` ``[num_tokens, num_kv_heads, head_dim]`` into ``kv_cache``.

    Token ``i`` goes to slot ``slot_mapping[i]`` (block ``slot // block_size``, offset
    ``slot % block_size``); negative entries are padding and are skipped. A calibrated
    preset needs the layer's ``calibration`` and each token's position in its sequence
    (``positions`` ``[num_tokens]``: position 0 is coded against its own offsets).
    """
    args = check_store_args(key, value, kv_cache, slot_mapping, preset, calibration=calibration, positions=positions)
    idx = torch.nonzero(slot_mapping >= 0).squeeze(1)
    if idx.numel() == 0:
        return
    slots = slot_mapping[idx].long()
    first = None if args.positions is None else args.positions[idx] == 0
    enc = encode_fields(key[idx], value[idx], args.preset, calibration, first)
    bs = args.layout.block_size
    write_fields(block_fields(kv_cache, args.layout), slots // bs, slots % bs, enc)


def _all_positions(kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    nb, bs = kv_cache.shape[:2]
    ids = torch.arange(nb * bs, device=kv_cache.device)
    return ids // bs, ids % bs


def to_vllm_cache(kv_cache: torch.Tensor, preset: str | Preset) -> torch.Tensor:
    """A new cache tensor with the same content in vLLM's per-slot arrangement.

    Every field byte is carried over exactly; padding bytes of the result are zero.
    """
    p = get_preset(preset)
    check_tensor(kv_cache, "kv_cache", ndim=4)
    lay = check_cache(kv_cache, p)
    nb, bs, h, _ = kv_cache.shape
    blocks, offs = _all_positions(kv_cache)
    enc = read_fields(block_fields(kv_cache, lay), blocks, offs)
    slots = fields_to_slots(enc, p, lay.head_dim)
    return slots.view(nb, bs, h, -1)


def from_vllm_cache(kv_cache: torch.Tensor, preset: str | Preset) -> torch.Tensor:
    """A new cache tensor in tq's block arrangement from a cache in vLLM's per-slot one.

    Inverse of :func:`to_vllm_cache`; padding bytes of the result are zero.
    """
    p = get_preset(preset)
    check_tensor(kv_cache, "kv_cache", ndim=4)
    lay = check_cache(kv_cache, p)
    nb, bs, h, s = kv_cache.shape
    enc = slots_to_fields(kv_cache.reshape(nb * bs, h, s), p, lay.head_dim)
    out = torch.zeros((nb, bs, h, s), dtype=torch.uint8, device=kv_cache.device)
    blocks, offs = _all_positions(kv_cache)
    write_fields(block_fields(out, lay), blocks, offs, enc)
    return out
