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

    ``norm_offset`` is ``None`` for fp8 keys, which store no norm. The fp16 at
    ``scale_offset`` is the uniform values' step, the Lloyd-Max values' norm or the symmetric
    values' ``s``; ``zero_offset`` is ``None`` for those two, which store no zero point.
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
    zero_offset: int | None
    slot_size: int
    slot_size_aligned: int

    @property
    def key_bytes(self) -> int:
        """Key codes (or fp8 key) plus the fp16 norm where present."""
        return self.key_code_bytes + (0 if self.norm_offset is None else 2)

    @property
    def value_bytes(self) -> int:
        """Value codes plus the fp16 scale (or norm) and the fp16 zero where present."""
        return self.value_code_bytes + (2 if self.zero_offset is None else 4)


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
    zero_offset: int | None
    used_bytes: int

    @property
    def head_stride(self) -> int:
        return self.block_size * self.slot_size_aligned

    @property
    def block_bytes(self) -> int:
        return self.head_stride * self.num_kv_heads


@dataclass(frozen=True)
class KernelFields:
    """Every number a kernel needs to address tq's cache block, computed once here.

    The addressing rule, the same for every field and every backend: entry ``t`` of
    ``field`` for kv head ``h`` of block ``b`` starts at byte

        ``b * block_stride + h * head_stride + <field>_offset + t * <field>_width``

    (``block_stride`` is the cache tensor's ``stride(0)``). Widths are bytes per token:
    ``key_width`` / ``value_width`` for the codes, 2 for the fp16 norm, scale and zero.
    tq-triton passes these as constexprs (:meth:`constexprs`), tq-sycl copies them into its
    C++ parameter struct; neither derives offsets itself.
    """

    head_dim: int
    log2_head_dim: int
    block_size: int
    num_kv_heads: int
    head_stride: int
    block_bytes: int
    key_fp8: bool
    key_bits: int
    value_bits: int
    norm_correction: bool
    key_offset: int
    key_width: int
    norm_offset: int  # -1: no norm (fp8 keys)
    value_offset: int
    value_width: int
    scale_offset: int
    zero_offset: int  # -1: no zero point (Lloyd-Max and symmetric values)

    @property
    def has_norm(self) -> bool:
        return self.norm_offset >= 0

    def constexprs(self) -> dict[str, int | bool]:
        """The block description as the Triton kernels' constexpr keyword arguments."""
        return {
            "D": self.head_dim,
            "LOG2_D": self.log2_head_dim,
            "BLOCK_SIZE": self.block_size,
            "HEAD_STRIDE": self.head_stride,
            "KEY_OFF": self.key_offset,
            "KEY_BYTES": self.key_width,
            "NORM_OFF": max(self.norm_offset, 0),
            "VAL_OFF": self.value_offset,
            "VAL_BYTES": self.value_width,
            "SCALE_OFF": self.scale_offset,
            "ZERO_OFF": max(self.zero_offset, 0),
            "KEY_FP8": self.key_fp8,
            "KBITS": self.key_bits,
            "VBITS": self.value_bits,
        }


# the members of KernelFields that BlockLayout has under the same name and meaning
_SAME_IN_BLOCK_LAYOUT = (
    "head_dim",
    "block_size",
    "num_kv_heads",
    "head_stride",
    "block_bytes",
    "key_offset",
    "value_offset",
    "scale_offset",
)


def kernel_fields(
    lay: BlockLayout, key_fp8: bool, key_bits: int, value_bits: int, norm_correction: bool
) -> KernelFields:
    """The :class:`KernelFields` of ``lay`` for a preset with these key/value formats."""
    return KernelFields(
        **{name: getattr(lay, name) for name in _SAME_IN_BLOCK_LAYOUT},
        log2_head_dim=lay.head_dim.bit_length() - 1,
        key_fp8=key_fp8,
        key_bits=key_bits,
        value_bits=value_bits,
        norm_correction=norm_correction,
        key_width=lay.key_code_bytes,
        norm_offset=-1 if lay.norm_offset is None else lay.norm_offset,
        zero_offset=-1 if lay.zero_offset is None else lay.zero_offset,
        value_width=lay.value_code_bytes,
    )


def slot_layout(
    head_dim: int, key_bits: int, value_bits: int, key_has_norm: bool, value_has_zero: bool = True
) -> SlotLayout:
    key_code_bytes = (head_dim * key_bits + 7) // 8
    norm_offset = key_code_bytes if key_has_norm else None
    value_offset = key_code_bytes + (2 if key_has_norm else 0)
    value_code_bytes = (head_dim * value_bits + 7) // 8
    scale_offset = value_offset + value_code_bytes
    zero_offset = scale_offset + 2 if value_has_zero else None
    slot_size = scale_offset + (4 if value_has_zero else 2)
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
    end = scale_offset + 2 * b
    zero_offset = None
    if slot.zero_offset is not None:
        zero_offset = _align(end)
        end = zero_offset + 2 * b
    used = end
    if used > b * slot.slot_size_aligned:
        return None
    return BlockLayout(
        **{
            name: getattr(slot, name)
            for name in ("head_dim", "slot_size_aligned", "key_code_bytes", "value_code_bytes")
        },
        block_size=b,
        num_kv_heads=num_kv_heads,
        key_offset=key_offset,
        norm_offset=norm_offset,
        value_offset=value_offset,
        scale_offset=scale_offset,
        zero_offset=zero_offset,
        used_bytes=used,
    )
