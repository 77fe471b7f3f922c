"""The four TurboQuant presets, with vLLM's names and per-token slot formats."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from .errors import PresetError, ShapeError
from .layout import BlockLayout, KernelFields, SlotLayout, block_layout, kernel_fields, slot_layout

SUPPORTED_HEAD_DIMS: tuple[int, ...] = (64, 128, 256, 512)


@dataclass(frozen=True)
class Preset:
    """A cache format: how keys and values of one (token, kv head) are encoded.

    ``key_kind`` is ``"fp8"`` (raw key cast to float8 e4m3, no rotation) or
    ``"lloyd_max"`` (norm + Hadamard-rotated unit vector, ``key_bits`` Lloyd-Max codes).
    Values are always per-token asymmetric uniform with ``value_bits`` bits.
    """

    name: str
    key_kind: Literal["fp8", "lloyd_max"]
    key_bits: int
    value_bits: int
    norm_correction: bool

    @property
    def key_is_fp8(self) -> bool:
        return self.key_kind == "fp8"

    def check_head_dim(self, head_dim: int, arg: str = "head_dim") -> None:
        if not isinstance(head_dim, int) or head_dim not in SUPPORTED_HEAD_DIMS:
            raise PresetError(
                f"{arg}={head_dim!r} is not supported by {self.name}: expected one of {SUPPORTED_HEAD_DIMS}"
            )

    def layout(self, head_dim: int) -> SlotLayout:
        """vLLM's per-token slot layout at ``head_dim``."""
        self.check_head_dim(head_dim)
        return _slot_layout_cached(head_dim, self.key_bits, self.value_bits, not self.key_is_fp8)

    def block_layout(self, head_dim: int, block_size: int, num_kv_heads: int = 1) -> BlockLayout:
        """tq's in-block arrangement for a cache block of ``block_size`` tokens."""
        if not isinstance(block_size, int) or block_size < 1:
            raise ShapeError(f"block_size={block_size!r}: expected a positive int")
        if not isinstance(num_kv_heads, int) or num_kv_heads < 1:
            raise ShapeError(f"num_kv_heads={num_kv_heads!r}: expected a positive int")
        bl = _block_layout_cached(self.layout(head_dim), block_size, num_kv_heads)
        if bl is None:
            raise ShapeError(
                f"block_size={block_size} is too small for tq's 16-byte aligned fields "
                f"with {self.name} at head_dim={head_dim}: use a multiple of 8 (vLLM uses 16-128)"
            )
        return bl

    def kernel_fields(self, lay: BlockLayout) -> KernelFields:
        """The offsets and sizes kernels address ``lay`` with (see :class:`KernelFields`)."""
        return _kernel_fields_cached(lay, self.key_is_fp8, self.key_bits, self.value_bits, self.norm_correction)

    def __str__(self) -> str:
        return self.name


# layouts are pure functions of small integers; launchers ask for them on every call
_slot_layout_cached = functools.lru_cache(maxsize=256)(slot_layout)
_block_layout_cached = functools.lru_cache(maxsize=1024)(block_layout)
_kernel_fields_cached = functools.lru_cache(maxsize=1024)(kernel_fields)

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("turboquant_k8v4", "fp8", 8, 4, norm_correction=False),
        Preset("turboquant_4bit_nc", "lloyd_max", 4, 4, norm_correction=True),
        Preset("turboquant_k3v4_nc", "lloyd_max", 3, 4, norm_correction=True),
        Preset("turboquant_3bit_nc", "lloyd_max", 3, 3, norm_correction=True),
    )
}


def get_preset(preset: str | Preset) -> Preset:
    """The :class:`Preset` called ``preset`` (a Preset is returned unchanged)."""
    if isinstance(preset, Preset):
        return preset
    if isinstance(preset, str) and preset in PRESETS:
        return PRESETS[preset]
    raise PresetError(f"preset={preset!r} is not a TurboQuant preset: expected one of {sorted(PRESETS)}")
