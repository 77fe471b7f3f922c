"""The TurboQuant codec: per (token, kv head) encoding of keys and values.

Keys, Lloyd-Max presets: store ||k|| (fp16) and the Lloyd-Max codes of the rotated unit
vector ``H k / ||k||`` (H: orthonormal Sylvester Hadamard, Gaussian codebook scaled by
1/sqrt(d)). Decoding gathers the centroid vector ``c``; with norm correction it is
rescaled to unit length, ``k_rot = ||k|| * c / ||c||``, and ``k = H k_rot``.

Keys, fp8 preset: the raw key cast to float8 e4m3 (saturating at ±448).

Values, vLLM's presets: per (token, head) asymmetric uniform: ``zero = min``, ``scale =
(max - min) / (2^b - 1)``, both stored as fp16, ``code = floor((v - zero) / scale + 1/2)``
computed with the stored fp16 scale and zero so that the decoder's ``zero + code * scale``
is the nearest representable level.

Values, Lloyd-Max (tq's calibrated formats but ``tq_k4v4``): coded exactly like a Lloyd-Max
key with ``value_bits`` bits (the norm in the scale field, no zero point).

Values, symmetric (``tq_k4v4``): the rotated vector ``y = H v`` (not normalised) on ``n =
2^value_bits`` equal cells of ``[-s, s]``: ``s = fp16(n / (n - 1) * max |y_i|)`` in the scale
field (so that the largest coordinate sits at the centre of an outer cell), ``code =
clamp(floor(n/2 * y / s) + n/2, 0, n - 1)`` computed with the stored fp16 ``s``, decoded to
the cell's centre ``s * (2 code + 1 - n) / n``. That is a table like the Lloyd-Max one
(:func:`value_codebook`: centroids ``(2 i + 1 - n) / n``), so every decoder of Lloyd-Max
values decodes it unchanged; a GPU can also compute it from the code's bits (``code - 7.5``
by the fp16 bit trick of vLLM's values) with no table.

tq's calibrated formats fold the norm correction into the stored number
(``Preset.folds_norm``): a Lloyd-Max key's norm field and value's scale field hold fp16
``||x|| / ||c||`` (float32 quotient, ``c`` the coded row's centroid vector), and decoding is
``stored * c`` with no sum of squares at read time.

Calibrated formats code ``a * (k - mu_p)`` and ``b * (v - nu_p)`` instead of the key and
value (:mod:`tq_core.calibration`); decoding with the layer's calibration returns the
model's keys and values, without it the coded vectors.

Non-finite inputs (one rule for every backend, docs/overview.md): a Lloyd-Max key whose
sum of squares is not finite in float32 (it holds a NaN or ±inf, or its norm overflows
float32) and a value that holds a NaN or ±inf are stored as the zero vector (norm 0, or
scale 0 and zero point 0; every code 0). A symmetric value follows the Lloyd-Max rule
(its sum of squares); so does an all-zero one (scale 0, codes 0). An fp8 key is converted
per element: NaN -> 0, ±inf saturate to ±448 like every element beyond ±448. Finite fields saturate to their
format: the fp16 key norm, value scale and zero point at ±65504. The cache therefore only
ever holds finite numbers, and such a token cannot reach other rows (0 * NaN in the
probability-value product of matrix-unit kernels) or other requests sharing its block.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from .bitpack import pack_codes, unpack_codes
from .calibration import LayerCalibration
from .codebooks import get_codebook
from .errors import PresetError
from .hadamard import fwht
from .presets import Preset, get_preset

FP16_MAX = 65504.0
FP8_E4M3_MAX = 448.0


class EncodedKV(NamedTuple):
    """The fields of encoded tokens; every tensor has leading dims ``[N, H]``."""

    key_codes: torch.Tensor  # uint8 [N, H, key_code_bytes]: packed codes or fp8 bytes
    key_norm: torch.Tensor | None  # float16 [N, H]; None for fp8 keys
    value_codes: torch.Tensor  # uint8 [N, H, value_code_bytes]
    value_scale: torch.Tensor  # float16 [N, H]: the uniform step, the Lloyd-Max norm or the symmetric s
    value_zero: torch.Tensor | None  # float16 [N, H]; None for Lloyd-Max and symmetric values


@functools.cache
def _codebook_cpu(bits: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    # shared by every encode and decode: never handed to a caller (see key_codebook)
    cb = get_codebook(bits, "gaussian")
    s = 1.0 / math.sqrt(head_dim)
    cent = torch.tensor(cb.centroids, dtype=torch.float64) * s
    bounds = torch.tensor(cb.boundaries, dtype=torch.float64) * s
    return cent.to(torch.float32), bounds.to(torch.float32)


def _shared_codebook(p: Preset, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The codec's own tables on ``device``: the cached tensors themselves on CPU, read only."""
    if p.key_is_fp8:
        raise ValueError(f"{p.name} stores fp8 keys and has no codebook")
    return _bits_codebook(p.key_bits, head_dim, device)


def _bits_codebook(bits: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    cent, bounds = _codebook_cpu(bits, head_dim)
    return cent.to(device), bounds.to(device)


def key_codebook(
    preset: str | Preset, head_dim: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(centroids, decision boundaries) in float32, already scaled by 1/sqrt(head_dim).

    Each call returns new tensors that the caller owns: editing them in place changes
    nothing that tq_core encodes or decodes later.
    """
    p = get_preset(preset)
    cent, bounds = _shared_codebook(p, head_dim, torch.device("cpu"))
    return cent.to(device, copy=True), bounds.to(device, copy=True)


@functools.cache
def _symmetric_cpu(bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = 1 << bits
    cent = torch.tensor([(2 * i + 1 - n) / n for i in range(n)], dtype=torch.float32)
    bounds = torch.tensor([(2 * i - n) / n for i in range(1, n)], dtype=torch.float32)
    return cent, bounds


def _value_table(p: Preset, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The codec's own value table of ``p`` on ``device`` (read only, see ``_shared_codebook``)."""
    if p.value_kind == "symmetric":
        cent, bounds = _symmetric_cpu(p.value_bits)
        return cent.to(device), bounds.to(device)
    return _bits_codebook(p.value_bits, head_dim, device)


def value_codebook(
    preset: str | Preset, head_dim: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(table, boundaries) in float32 of the values of tq's calibrated formats: a value
    decodes as its scale field times ``table[code]``, rotated back. Lloyd-Max values
    (``value_bits`` bits): :func:`key_codebook`'s, scaled by ``1/sqrt(head_dim)``; symmetric
    values: the cell centres ``(2 i + 1 - n) / n`` and the cell edges ``(2 i - n) / n`` of
    ``y / s`` (``n = 2^value_bits``, any head_dim). New tensors the caller owns."""
    p = get_preset(preset)
    if p.value_is_uniform:
        raise ValueError(f"{p.name} stores uniform values and has no value codebook")
    cent, bounds = _value_table(p, head_dim, torch.device("cpu"))
    return cent.to(device, copy=True), bounds.to(device, copy=True)


def rotate(x: torch.Tensor) -> torch.Tensor:
    """Apply the key rotation (orthonormal Hadamard) along the last dim, in float32."""
    return fwht(x.float())


def _as_fp16_bytes(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).contiguous().view(torch.uint8).view(*x.shape, 2)


def _from_fp16_bytes(b: torch.Tensor) -> torch.Tensor:
    return b.contiguous().view(torch.float16).squeeze(-1)


def lloyd_max_encode(x: torch.Tensor, bits: int, fold_norm: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Vectors ``[..., d]`` -> (packed ``bits``-bit Lloyd-Max codes of ``H x / ||x||``, fp16
    norms): the code of Lloyd-Max keys, and of the values of tq's calibrated formats. A
    vector whose sum of squares is not finite in float32 is coded as the zero vector.
    ``fold_norm``: the fp16 number is ``||x|| / ||c||`` (``Preset.folds_norm``)."""
    x = x.float()
    d = x.shape[-1]
    bad = ~torch.isfinite((x * x).sum(-1))  # the fused store's test: its own sum of squares
    x = torch.where(bad[..., None], torch.zeros_like(x), x)
    norm = torch.linalg.vector_norm(x, dim=-1)
    y = rotate(x)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    unit = torch.where((norm > 0)[..., None], y / safe[..., None], torch.zeros_like(y))
    cent, bounds = _bits_codebook(bits, d, x.device)
    # a coordinate exactly on a boundary takes the upper code, as vLLM's store does
    codes = torch.searchsorted(bounds, unit.contiguous(), right=True)
    codes = torch.where(bad[..., None], torch.zeros_like(codes), codes)
    if fold_norm:
        # a Gaussian codebook has no zero centroid, so ||c|| > 0 for every row
        norm = norm / torch.linalg.vector_norm(cent[codes], dim=-1)
    norm16 = norm.clamp(max=FP16_MAX).to(torch.float16)
    return pack_codes(codes, bits), norm16


def lloyd_max_decode(
    codes: torch.Tensor, norm: torch.Tensor, bits: int, head_dim: int, norm_correction: bool, rotated: bool = False
) -> torch.Tensor:
    """Inverse of :func:`lloyd_max_encode` in float32; ``rotated=True`` skips the final H."""
    cent, _ = _bits_codebook(bits, head_dim, codes.device)
    return _table_decode(codes, norm, cent, bits, head_dim, norm_correction, rotated)


def _table_decode(
    codes: torch.Tensor,
    norm: torch.Tensor,
    cent: torch.Tensor,
    bits: int,
    head_dim: int,
    norm_correction: bool,
    rotated: bool = False,
) -> torch.Tensor:
    """``H (norm * table[code])`` in float32 (``cent`` the table; ``norm_correction``: the
    table's vector scaled to unit length first): Lloyd-Max and symmetric codes alike."""
    c = cent[unpack_codes(codes, bits, head_dim)]
    if norm_correction:
        cn = torch.linalg.vector_norm(c, dim=-1, keepdim=True)
        c = c / cn
    x_rot = norm.float()[..., None] * c
    return x_rot if rotated else rotate(x_rot)


def symmetric_encode(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Vectors ``[..., d]`` -> (packed ``bits``-bit symmetric codes of ``y = H x``, fp16 ``s``):
    ``n = 2^bits`` equal cells of ``[-s, s]``, ``s = n / (n - 1) * max |y_i|`` (fp16,
    saturating at 65504), each code the cell of ``y_i / s`` with the stored ``s``. A vector
    whose sum of squares is not finite in float32, and the zero vector, get ``s = 0`` and
    code 0 throughout."""
    x = x.float()
    n = 1 << bits
    bad = ~torch.isfinite((x * x).sum(-1))
    x = torch.where(bad[..., None], torch.zeros_like(x), x)
    y = rotate(x)
    amax = y.abs().amax(-1)
    s16 = (amax * (n / (n - 1))).clamp(max=FP16_MAX).to(torch.float16)
    s = s16.float()[..., None]
    live = s > 0
    cell = torch.floor(y / torch.where(live, s, torch.ones_like(s)) * (n // 2)) + n // 2
    codes = torch.where(live, cell.clamp(0, n - 1), torch.zeros_like(cell)).to(torch.int64)
    return pack_codes(codes, bits), s16


def quantize_keys(key: torch.Tensor, preset: Preset) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Keys ``[..., d]`` -> (packed codes or fp8 bytes, fp16 norms or None). Non-finite
    input: see the module docstring."""
    k = key.float()
    if preset.key_is_fp8:
        fp8 = torch.nan_to_num(k, nan=0.0).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        return fp8.view(torch.uint8), None
    return lloyd_max_encode(k, preset.key_bits, preset.folds_norm)


def dequantize_keys(
    key_codes: torch.Tensor, key_norm: torch.Tensor | None, preset: Preset, head_dim: int, rotated: bool = False
) -> torch.Tensor:
    """Inverse of :func:`quantize_keys` in float32; ``rotated=True`` skips the final H."""
    if preset.key_is_fp8:
        return key_codes.contiguous().view(torch.float8_e4m3fn).float()
    assert key_norm is not None
    return lloyd_max_decode(key_codes, key_norm, preset.key_bits, head_dim, preset.norm_correction, rotated)


def quantize_values(value: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Values ``[..., d]`` -> (packed codes, fp16 scale, fp16 zero). A value holding a NaN or
    ±inf is stored as zeros (see the module docstring)."""
    v = value.float()
    v = torch.where(torch.isfinite(v).all(-1, keepdim=True), v, torch.zeros_like(v))
    levels = (1 << bits) - 1
    vmin = v.amin(-1)
    vmax = v.amax(-1)
    scale16 = ((vmax - vmin) / levels).clamp(max=FP16_MAX).to(torch.float16)
    zero16 = vmin.clamp(-FP16_MAX, FP16_MAX).to(torch.float16)
    scale = scale16.float()[..., None]
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.floor((v - zero16.float()[..., None]) / safe + 0.5).clamp(0, levels)
    q = torch.where(scale > 0, q, torch.zeros_like(q))
    return pack_codes(q.to(torch.int32), bits), scale16, zero16


def dequantize_values(
    value_codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int, head_dim: int
) -> torch.Tensor:
    q = unpack_codes(value_codes, bits, head_dim).float()
    return zero.float()[..., None] + q * scale.float()[..., None]


def encode_fields(
    key: torch.Tensor,
    value: torch.Tensor,
    preset: str | Preset,
    calibration: LayerCalibration | None = None,
    first: torch.Tensor | None = None,
) -> EncodedKV:
    """Encode ``key``/``value`` ``[N, H, d]`` into separate fields (no validation).

    Calibrated presets need the layer's ``calibration``; ``first`` (bool ``[N]``, None: no
    token) marks the tokens at position 0 of their sequence."""
    p = get_preset(preset)
    if p.calibrated:
        if calibration is None:
            raise PresetError(f"{p.name} is a calibrated format: pass the layer's calibration")
        key, value = calibration.code(key, value, first)
    kc, kn = quantize_keys(key, p)
    if p.value_is_uniform:
        vc, vs, vz = quantize_values(value, p.value_bits)
        return EncodedKV(kc, kn, vc, vs, vz)
    if p.value_kind == "symmetric":
        vc, vn = symmetric_encode(value, p.value_bits)
    else:
        vc, vn = lloyd_max_encode(value, p.value_bits, p.folds_norm)
    return EncodedKV(kc, kn, vc, vn, None)


def decode_fields(
    fields: EncodedKV,
    preset: str | Preset,
    head_dim: int,
    rotated: bool = False,
    calibration: LayerCalibration | None = None,
    first: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoded float32 ``(key, value)``. For a calibrated preset, with the layer's
    ``calibration`` (and ``first`` as at encoding) the model's keys and values; without it
    the coded vectors the cache holds. ``rotated=True`` leaves Lloyd-Max keys in the
    Hadamard domain (not with a calibration)."""
    p = get_preset(preset)
    k = dequantize_keys(fields.key_codes, fields.key_norm, p, head_dim, rotated=rotated)
    if p.value_is_uniform:
        assert fields.value_zero is not None
        v = dequantize_values(fields.value_codes, fields.value_scale, fields.value_zero, p.value_bits, head_dim)
    else:
        # Lloyd-Max and symmetric values: the scale field times the value table's entry
        cent, _ = _value_table(p, head_dim, fields.value_codes.device)
        v = _table_decode(fields.value_codes, fields.value_scale, cent, p.value_bits, head_dim, p.norm_correction)
    if p.calibrated and calibration is not None:
        if rotated:
            raise ValueError("rotated=True decodes the coded keys: pass no calibration")
        k, v = calibration.uncode(k, v, first)
    return k, v


def fields_to_slots(fields: EncodedKV, preset: str | Preset, head_dim: int) -> torch.Tensor:
    """Arrange fields as vLLM's slots: uint8 ``[N, H, slot_size_aligned]`` (pad bytes zero)."""
    lay = get_preset(preset).layout(head_dim)
    n, h = fields.key_codes.shape[:2]
    out = torch.zeros(n, h, lay.slot_size_aligned, dtype=torch.uint8, device=fields.key_codes.device)
    out[..., lay.key_offset : lay.key_offset + lay.key_code_bytes] = fields.key_codes
    if lay.norm_offset is not None:
        out[..., lay.norm_offset : lay.norm_offset + 2] = _as_fp16_bytes(fields.key_norm)
    out[..., lay.value_offset : lay.value_offset + lay.value_code_bytes] = fields.value_codes
    out[..., lay.scale_offset : lay.scale_offset + 2] = _as_fp16_bytes(fields.value_scale)
    if lay.zero_offset is not None:
        out[..., lay.zero_offset : lay.zero_offset + 2] = _as_fp16_bytes(fields.value_zero)
    return out


def slots_to_fields(slots: torch.Tensor, preset: str | Preset, head_dim: int) -> EncodedKV:
    lay = get_preset(preset).layout(head_dim)
    norm = None
    if lay.norm_offset is not None:
        norm = _from_fp16_bytes(slots[..., lay.norm_offset : lay.norm_offset + 2])
    return EncodedKV(
        key_codes=slots[..., lay.key_offset : lay.key_offset + lay.key_code_bytes],
        key_norm=norm,
        value_codes=slots[..., lay.value_offset : lay.value_offset + lay.value_code_bytes],
        value_scale=_from_fp16_bytes(slots[..., lay.scale_offset : lay.scale_offset + 2]),
        value_zero=None
        if lay.zero_offset is None
        else _from_fp16_bytes(slots[..., lay.zero_offset : lay.zero_offset + 2]),
    )
