"""tq's cache formats: vLLM's four TurboQuant presets (vLLM's names and slot formats) and
tq's calibrated formats (``tq_*``), with their per-token slot formats."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import astuple, dataclass
from types import MappingProxyType
from typing import Literal

from .codebooks import GAUSSIAN_BITS
from .errors import PresetError, ShapeError
from .layout import BlockLayout, KernelFields, SlotLayout, block_layout, kernel_fields, slot_layout

SUPPORTED_HEAD_DIMS: tuple[int, ...] = (64, 128, 256, 512)

KEY_KINDS: tuple[str, ...] = ("fp8", "lloyd_max")
VALUE_KINDS: tuple[str, ...] = ("uniform", "lloyd_max", "symmetric")

# (name, key_kind, key_bits, value_bits, norm_correction, value_kind, calibrated) of every
# preset tq implements. The kernels are specialised to exactly these formats (tq-triton
# unpacks 3- and 4-bit codes only; tq-sycl looks presets up by name), so a Preset must be one
# of them: a custom format would be accepted by the reference codec and computed
# differently, or not at all, by the fast backends. The first four are vLLM's, byte for
# byte (their decoders correct the norm: ``norm_correction``); the ``tq_*`` formats are tq's
# own (docs/format.md, "Calibrated formats"), which store the corrected norm instead
# (``Preset.folds_norm``), so that their decoders only multiply.
_SHIPPED: tuple[tuple[str, str, int, int, bool, str, bool], ...] = (
    ("turboquant_k8v4", "fp8", 8, 4, False, "uniform", False),
    ("turboquant_4bit_nc", "lloyd_max", 4, 4, True, "uniform", False),
    ("turboquant_k3v4_nc", "lloyd_max", 3, 4, True, "uniform", False),
    ("turboquant_3bit_nc", "lloyd_max", 3, 3, True, "uniform", False),
    ("tq_k4v3", "lloyd_max", 4, 3, False, "lloyd_max", True),
    ("tq_k4v4", "lloyd_max", 4, 4, False, "symmetric", True),
    ("tq_k6v5", "lloyd_max", 6, 5, False, "lloyd_max", True),
)


@dataclass(frozen=True)
class Preset:
    """A cache format: how keys and values of one (token, kv head) are encoded.

    ``key_kind`` is ``"fp8"`` (raw key cast to float8 e4m3, no rotation) or
    ``"lloyd_max"`` (norm + Hadamard-rotated unit vector, ``key_bits`` Lloyd-Max codes).
    ``value_kind`` is ``"uniform"`` (per-token asymmetric uniform with ``value_bits`` bits:
    fp16 scale and zero point), ``"lloyd_max"`` (coded like a Lloyd-Max key: fp16 norm and
    ``value_bits`` codes of the rotated unit vector) or ``"symmetric"`` (the rotated vector
    ``y`` on ``2**value_bits`` equal cells of ``[-s, s]``, one fp16 ``s`` per token, each
    coordinate decoded to its cell's centre: :func:`tq_core.codec.symmetric_encode`). Both
    of the last two decode as the stored number times a table entry picked by the code
    (``tq_core.value_codebook``). ``norm_correction``: the decoder
    rescales a Lloyd-Max row's centroid vector ``c`` to unit length (``||x|| * c / ||c||``).
    ``calibrated`` formats encode keys and values against per-layer statistics of the model
    (:class:`tq_core.Calibration`) and store ``||x|| / ||c||`` in the norm fields
    (:attr:`folds_norm`), so their decoders need no correction.

    Only the shipped formats (:data:`PRESETS`, :data:`CALIBRATED_PRESETS`) can be
    constructed: every field is validated and any other combination raises
    :class:`PresetError`, because the backends implement exactly those.
    """

    name: str
    key_kind: Literal["fp8", "lloyd_max"]
    key_bits: int
    value_bits: int
    norm_correction: bool
    value_kind: Literal["uniform", "lloyd_max"] = "uniform"
    calibrated: bool = False

    def __post_init__(self) -> None:
        def is_int(x: object) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        if not isinstance(self.name, str) or not self.name:
            raise PresetError(f"Preset name={self.name!r}: expected a non-empty str")
        where = f"Preset {self.name!r}"
        if self.key_kind not in KEY_KINDS:
            raise PresetError(f"{where}: key_kind={self.key_kind!r}, expected one of {KEY_KINDS}")
        if not is_int(self.key_bits):
            raise PresetError(f"{where}: key_bits={self.key_bits!r}, expected an int")
        if not is_int(self.value_bits) or not 1 <= self.value_bits <= 8:
            raise PresetError(f"{where}: value_bits={self.value_bits!r}, expected an int in 1..8")
        if not isinstance(self.norm_correction, bool):
            raise PresetError(f"{where}: norm_correction={self.norm_correction!r}, expected a bool")
        if self.value_kind not in VALUE_KINDS:
            raise PresetError(f"{where}: value_kind={self.value_kind!r}, expected one of {VALUE_KINDS}")
        if not isinstance(self.calibrated, bool):
            raise PresetError(f"{where}: calibrated={self.calibrated!r}, expected a bool")
        if self.value_kind == "symmetric" and not self.calibrated:
            raise PresetError(f"{where}: symmetric values are a calibrated format's (calibrated=True)")
        if self.value_kind == "lloyd_max" and self.value_bits not in GAUSSIAN_BITS:
            raise PresetError(f"{where}: value_bits={self.value_bits}, the Lloyd-Max codebooks cover {GAUSSIAN_BITS}")
        if self.key_kind == "fp8":
            if self.key_bits != 8:
                raise PresetError(f"{where}: fp8 keys are 8 bits, got key_bits={self.key_bits}")
            if self.norm_correction:
                raise PresetError(f"{where}: fp8 keys store no norm, so norm_correction must be False")
        elif self.key_bits not in GAUSSIAN_BITS:
            raise PresetError(f"{where}: key_bits={self.key_bits}, the Lloyd-Max codebooks cover {GAUSSIAN_BITS}")
        if astuple(self) not in _SHIPPED:
            names = {fmt[1:]: fmt[0] for fmt in _SHIPPED}
            twin = names.get(astuple(self)[1:])
            if twin is not None:
                raise PresetError(f"{where}: this format is the shipped preset {twin!r}; name it so")
            shipped = ", ".join(f"Preset{fmt!r}" for fmt in _SHIPPED)
            raise PresetError(
                f"{where}: ({self.key_kind}, key_bits={self.key_bits}, value_bits={self.value_bits}, "
                f"norm_correction={self.norm_correction}, value_kind={self.value_kind}, "
                f"calibrated={self.calibrated}) is not a format tq implements; custom presets are "
                f"not supported because the kernels implement only the shipped ones: {shipped}"
            )

    @property
    def key_is_fp8(self) -> bool:
        return self.key_kind == "fp8"

    @property
    def value_is_uniform(self) -> bool:
        return self.value_kind == "uniform"

    @property
    def folds_norm(self) -> bool:
        """Whether the stored norm of a Lloyd-Max row (a key's norm, a Lloyd-Max value's
        scale) is ``||x|| / ||c||``, ``c`` the row's centroid vector, so that decoding is the
        centroids times the stored number: tq's calibrated formats. vLLM's formats store
        ``||x||`` and divide by ``||c||`` when decoding (``norm_correction``), which costs
        every read a sum of squares."""
        return self.calibrated

    def check_head_dim(self, head_dim: int, arg: str = "head_dim") -> None:
        if not isinstance(head_dim, int) or head_dim not in SUPPORTED_HEAD_DIMS:
            raise PresetError(
                f"{arg}={head_dim!r} is not supported by {self.name}: expected one of {SUPPORTED_HEAD_DIMS}"
            )

    def layout(self, head_dim: int) -> SlotLayout:
        """vLLM's per-token slot layout at ``head_dim``."""
        self.check_head_dim(head_dim)
        return _slot_layout_cached(head_dim, self.key_bits, self.value_bits, not self.key_is_fp8, self.value_is_uniform)

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

PRESETS: Mapping[str, Preset] = MappingProxyType({fmt[0]: Preset(*fmt) for fmt in _SHIPPED if not fmt[6]})
"""vLLM's four TurboQuant presets by vLLM cache dtype name (read only): what every backend
implements."""

CALIBRATED_PRESETS: Mapping[str, Preset] = MappingProxyType({fmt[0]: Preset(*fmt) for fmt in _SHIPPED if fmt[6]})
"""tq's calibrated formats by name (read only); tq-core implements them (docs/format.md)."""

_ALL: Mapping[str, Preset] = MappingProxyType({**PRESETS, **CALIBRATED_PRESETS})


def get_preset(preset: str | Preset) -> Preset:
    """The :class:`Preset` called ``preset``; a Preset is returned as the shipped one it equals."""
    if isinstance(preset, Preset):
        shipped = _ALL.get(preset.name) if isinstance(preset.name, str) else None
        if shipped is preset or shipped == preset:
            return shipped
        raise PresetError(f"preset={preset!r} is not one of the shipped presets: expected one of {sorted(_ALL)}")
    if isinstance(preset, str) and preset in _ALL:
        return _ALL[preset]
    raise PresetError(f"preset={preset!r} is not a TurboQuant preset: expected one of {sorted(_ALL)}")
