"""Byte layouts: vLLM's per-token slot and tq's per-block arrangement.

A *slot* is what vLLM stores per (token, kv head): ``[key | value | pad to even]``.
tq keeps vLLM's cache tensor shape and bytes per block, but inside a block it stores,
per kv head, each field of all the block's tokens contiguously and 16-byte aligned, so
kernels read whole fields with wide aligned loads instead of 2-byte-aligned gathers.
"""

from __future__ import annotations

from dataclasses import dataclass

FIELD_ALIGN = 16


def _align(n: int, a: int = FIELD_ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class SlotLayout:
    """vLLM's per-token slot for one kv head (offsets in bytes from the slot start).

    ``norm_offset`` is ``None`` for fp8 keys, which store no norm.
    """

    head_dim: int
    key_bits: int
    value_bits: int
    key_offset: int
    key_code_bytes: int
    norm_offset: int | None
    value_offset: int
    value_code_bytes: int
    scale_offset: int
    zero_offset: int
    slot_size: int
    slot_size_aligned: int

    @property
    def key_bytes(self) -> int:
        """Key codes (or fp8 key) plus the fp16 norm where present."""
        return self.key_code_bytes + (0 if self.norm_offset is None else 2)

    @property
    def value_bytes(self) -> int:
        """Value codes plus fp16 scale and fp16 zero."""
        return self.value_code_bytes + 4


@dataclass(frozen=True)
class BlockLayout:
    """tq's arrangement of one cache block, per kv head.

    Head ``h`` of a block starts at byte ``h * head_stride`` of the block; inside it each
    field below holds ``block_size`` consecutive per-token entries, starting at a
    16-byte-aligned offset. Bytes past ``used_bytes`` are padding (kept zero).
    """

    head_dim: int
    block_size: int
    num_kv_heads: int
    slot_size_aligned: int
    key_code_bytes: int
    value_code_bytes: int
    key_offset: int
    norm_offset: int | None
    value_offset: int
    scale_offset: int
    zero_offset: int
    used_bytes: int

    @property
    def head_stride(self) -> int:
        return self.block_size * self.slot_size_aligned

    @property
    def block_bytes(self) -> int:
        return self.head_stride * self.num_kv_heads


def slot_layout(head_dim: int, key_bits: int, value_bits: int, key_has_norm: bool) -> SlotLayout:
    key_code_bytes = (head_dim * key_bits + 7) // 8
    norm_offset = key_code_bytes if key_has_norm else None
    value_offset = key_code_bytes + (2 if key_has_norm else 0)
    value_code_bytes = (head_dim * value_bits + 7) // 8
    scale_offset = value_offset + value_code_bytes
    zero_offset = scale_offset + 2
    slot_size = zero_offset + 2
    return SlotLayout(
        head_dim=head_dim,
        key_bits=key_bits,
        value_bits=value_bits,
        key_offset=0,
        key_code_bytes=key_code_bytes,
        norm_offset=norm_offset,
        value_offset=value_offset,
        value_code_bytes=value_code_bytes,
        scale_offset=scale_offset,
        zero_offset=zero_offset,
        slot_size=slot_size,
        slot_size_aligned=slot_size + (slot_size % 2),
    )


def block_layout(slot: SlotLayout, block_size: int, num_kv_heads: int) -> BlockLayout | None:
    """tq's block arrangement, or ``None`` when the aligned fields do not fit the block."""
    b = block_size
    key_offset = 0
    end = b * slot.key_code_bytes
    norm_offset = None
    if slot.norm_offset is not None:
        norm_offset = _align(end)
        end = norm_offset + 2 * b
    value_offset = _align(end)
    scale_offset = _align(value_offset + b * slot.value_code_bytes)
    zero_offset = _align(scale_offset + 2 * b)
    used = zero_offset + 2 * b
    if used > b * slot.slot_size_aligned:
        return None
    return BlockLayout(
        head_dim=slot.head_dim,
        block_size=b,
        num_kv_heads=num_kv_heads,
        slot_size_aligned=slot.slot_size_aligned,
        key_code_bytes=slot.key_code_bytes,
        value_code_bytes=slot.value_code_bytes,
        key_offset=key_offset,
        norm_offset=norm_offset,
        value_offset=value_offset,
        scale_offset=scale_offset,
        zero_offset=zero_offset,
        used_bytes=used,
    )
