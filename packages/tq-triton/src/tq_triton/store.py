"""Fused store: encode new keys and values and write them into tq's paged layout.

One program encodes ``BLOCK_T`` tokens of one kv head: key norm, Hadamard rotation,
codebook search (or saturating fp8 cast), bit packing, value min/max quantisation (or,
for tq's calibrated formats, the Lloyd-Max code of the value too, both coded against the
layer's calibration), and writes each field into its block's per-head field run.
Byte-identical to ``tq_core.store`` except for codes that sit on a rounding boundary.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import triton
import triton.language as tl

from tq_core import LayerCalibration, Preset
from tq_core.contract import check_store_args, debug_enabled

from .bitpack import store_codes
from .cache_fields import FP16_BYTES, field_ptr
from .code_bins import codebook_codes_bins
from .device import check_runnable, nvidia
from .device_tensors import cached_bins, cached_codebook, cached_value_codebook, dummy
from .hadamard import fwht_rows
from .tuning import StoreConfig, launch_options, store_config

FP16_MAX = tl.constexpr(65504.0)
FP8_MAX = tl.constexpr(448.0)
FP32_INF = tl.constexpr(float("inf"))


@triton.jit
def _fp8_e4m3_bits(x):
    """float32 -> float8 e4m3fn bit patterns, round-half-even, saturating at ±448.

    Done with integer arithmetic because backends disagree on the cast (the interpreter
    rounds some values a binade low; not every Xe target has a native conversion).
    """
    a = tl.minimum(tl.abs(x), FP8_MAX)
    bits = a.to(tl.int32, bitcast=True)
    # round the 23-bit mantissa to 3 bits, half to even; a carry moves into the exponent
    r = (bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20
    normal = r - (120 << 3)  # rebias the exponent from 127 to 7
    # below 2^-6 e4m3 is subnormal with step 2^-9; adding 2^23 rounds half to even
    sub = ((a * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    code = tl.where(a < 0.015625, sub, normal)
    code = code | tl.where(x.to(tl.int32, bitcast=True) < 0, 0x80, 0)
    return code.to(tl.uint8)


@triton.jit
def _min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def codebook_codes(u, Bounds, NUM_BOUNDS: tl.constexpr):
    """Codes of the coordinates ``u``: the number of the ``NUM_BOUNDS`` ascending boundaries
    that are <= u, so that a coordinate on a boundary takes the upper code (vLLM's rule)."""
    codes = tl.zeros(u.shape, dtype=tl.uint32)
    for j in tl.static_range(NUM_BOUNDS):
        codes += (u >= tl.load(Bounds + j)).to(tl.uint32)
    return codes


@triton.jit
def _pick(c, hi, lo):
    """``hi`` where the comparison ``c`` holds, else ``lo`` (scalars or tensors)."""
    return tl.where(c, hi, lo)


@triton.jit
def _seven(B, S: tl.constexpr = 1):
    """The seven float32 numbers at ``B + S * i - 1`` for ``i`` in 1..7: the boundaries that
    split a codebook of ``8 * S`` codes into eighths."""
    return (
        tl.load(B + S - 1),
        tl.load(B + 2 * S - 1),
        tl.load(B + 3 * S - 1),
        tl.load(B + 4 * S - 1),
        tl.load(B + 5 * S - 1),
        tl.load(B + 6 * S - 1),
        tl.load(B + 7 * S - 1),
    )


@triton.jit
def _eighth(u, Bounds, S: tl.constexpr):
    """Which eighth (0..7) of a codebook of ``8 * S`` codes ``u`` falls in: three comparisons,
    against boundaries picked by selects among the seven that split it (loaded once)."""
    b0, b1, b2, b3, b4, b5, b6 = _seven(Bounds, S)
    c2 = u >= b3
    c1 = u >= _pick(c2, b5, b1)
    c0 = u >= _pick(c2, _pick(c1, b6, b4), _pick(c1, b2, b0))
    return c2.to(tl.uint32) * 4 + c1.to(tl.uint32) * 2 + c0.to(tl.uint32)


@triton.jit
def codebook_codes_bsearch(u, Bounds, KBITS: tl.constexpr):
    """:func:`codebook_codes` by binary search, for codebooks of 3 to 6 bits: one comparison
    per code bit against the boundary that splits the codes still possible. 3 and 4 bits
    pick every boundary by selects among boundaries loaded once; 5 and 6 bits find the
    code's eighth that way, then gather the boundary of each remaining step from the
    table (``KBITS - 3`` loads per coordinate, from a table of at most 63 numbers). The same
    ``>=`` rule, so the same codes; NaN compares false everywhere and takes code 0."""
    if KBITS == 3:
        return _eighth(u, Bounds, 1)
    elif KBITS == 4:
        b0, b1, b2, b3, b4, b5, b6 = _seven(Bounds)
        b7 = tl.load(Bounds + 7)
        b8, b9, b10, b11, b12, b13, b14 = _seven(Bounds + 8)
        c3 = u >= b7
        c2 = u >= _pick(c3, b11, b3)
        c1 = u >= _pick(c3, _pick(c2, b13, b9), _pick(c2, b5, b1))
        t_hi = _pick(c2, _pick(c1, b14, b12), _pick(c1, b10, b8))
        t_lo = _pick(c2, _pick(c1, b6, b4), _pick(c1, b2, b0))
        c0 = u >= _pick(c3, t_hi, t_lo)
        return c3.to(tl.uint32) * 8 + c2.to(tl.uint32) * 4 + c1.to(tl.uint32) * 2 + c0.to(tl.uint32)
    else:
        S: tl.constexpr = 1 << (KBITS - 3)
        codes = _eighth(u, Bounds, S) * S
        for level in tl.static_range(KBITS - 3):
            probe = codes + (S >> (level + 1))
            codes = tl.where(u >= tl.load(Bounds + (probe - 1)), probe, codes)
        return codes


@triton.jit
def _lloyd_max_code(
    x,
    Bounds,
    BLOCK_T: tl.constexpr,
    D: tl.constexpr,
    LOG2_D: tl.constexpr,
    BITS: tl.constexpr,
    NUM_BOUNDS: tl.constexpr,
    CODE_SEARCH: tl.constexpr,
    Centroids=None,
    FOLD: tl.constexpr = False,
):
    """Rows ``x`` ``[BLOCK_T, D]`` (float32) -> (codes ``[BLOCK_T, D]`` of ``H x / ||x||``,
    norms ``[BLOCK_T]``): the Lloyd-Max code of keys, and of calibrated formats' values. A
    row whose sum of squares is not finite gets norm 0 and code 0 throughout.
    ``FOLD`` (``Preset.folds_norm``): the norm is divided by the norm of the row's centroids
    (float32 ``Centroids``, gathered by code; no Gaussian centroid is 0)."""
    ss = tl.sum(x * x, axis=1)  # NaN or inf for a row with a non-finite element
    bad = ~(ss < FP32_INF)
    norm = tl.where(bad, 0.0, tl.sqrt(ss))
    y = fwht_rows(x, BLOCK_T, D, LOG2_D)
    # y is sqrt(D) * (H x); the unit vector's coordinate is y / (sqrt(D) * norm), taken with
    # one reciprocal square root per row; a subnormal ss (which the approximation may flush
    # to 0) is first scaled by 2**64. A bad row's coordinates become NaN, which lies at or
    # above no boundary: code 0 throughout
    tiny = ss < 1e-30
    r = tl.math.rsqrt(tl.where(tiny, ss * 18446744073709551616.0, tl.where(ss > 0, ss, 1.0)))
    inv = tl.where(ss > 0, r * tl.where(tiny, 4294967296.0, 1.0) * tl.math.rsqrt(D * 1.0), 0.0)
    inv = tl.where(bad, float("nan"), inv)
    u = y * inv[:, None]
    if CODE_SEARCH == 2:
        codes = codebook_codes_bins(u, Bounds)
    elif CODE_SEARCH == 1 and BITS >= 3:
        codes = codebook_codes_bsearch(u, Bounds, BITS)
    else:
        codes = codebook_codes(u, Bounds, NUM_BOUNDS)
    if FOLD:
        c = tl.load(Centroids + codes)
        norm = norm / tl.sqrt(tl.sum(c * c, axis=1))
    return codes, norm


@triton.jit
def _symmetric_code(x, BLOCK_T: tl.constexpr, D: tl.constexpr, LOG2_D: tl.constexpr, BITS: tl.constexpr):
    """Rows ``x`` ``[BLOCK_T, D]`` (float32) -> (codes ``[BLOCK_T, D]``, fp16 ``s``): the
    symmetric value code of ``tq_k4v4`` (``tq_core.codec.symmetric_encode``): ``y = H x`` by
    butterflies, ``s = fp16(n / (n - 1) * max |y_i|)``, each code the cell ``floor(n/2 * y_i /
    s) + n/2`` of ``[-s, s]`` (``n = 2^BITS``), clamped to ``0 .. n - 1``. A row whose sum of
    squares is not finite, and a zero row, get ``s = 0`` and code 0 throughout."""
    N: tl.constexpr = 1 << BITS
    HALF: tl.constexpr = N // 2
    ss = tl.sum(x * x, axis=1)
    bad = ~(ss < FP32_INF)
    # the rows are bounded (finite sums of squares): the unnormalised transform cannot overflow
    y = fwht_rows(tl.where(bad[:, None], 0.0, x), BLOCK_T, D, LOG2_D) / tl.sqrt(D * 1.0)
    amax = tl.max(tl.abs(y), axis=1)
    s16 = tl.minimum(amax * (N / (N - 1)), FP16_MAX).to(tl.float16)
    s = s16.to(tl.float32)
    live = s > 0
    cell = tl.floor(y / tl.where(live, s, 1.0)[:, None] * HALF) + HALF
    cell = tl.minimum(tl.maximum(cell, 0.0), N - 1.0)
    return tl.where(live[:, None], cell, 0.0).to(tl.uint32), s16


@triton.jit
def _coded(x, first, Gain, Offset, FirstOffset, ch):
    """Calibrated formats: the vectors the cache codes, ``gain * (x - offset)``, with the
    first-position offset where ``first`` ([BLOCK_T, D] bool, one value per row) holds.
    The gains are read into every row of the tile, as ``first`` is (one load per element;
    the rows read the same lines): broadcast from a ``[D]`` vector they cost Triton a layout
    conversion (docs/perf/runs/2026-12-06-store-positions)."""
    off = tl.where(first, tl.load(FirstOffset + ch)[None, :], tl.load(Offset + ch)[None, :])
    return (x - off) * tl.load(Gain + ch[None, :] + tl.zeros_like(first).to(ch.dtype))


@triton.jit
def _rows(X, row0, stride_t, r, live, D: tl.constexpr):
    """Rows ``row0 + r * stride_t`` of ``X`` (``row0`` a scalar element offset, ``r`` the
    program's token numbers) as float32 ``[len(r), D]``, zero where ``live`` is false."""
    d = tl.arange(0, D)
    return tl.load(X + row0 + (r * stride_t)[:, None] + d[None, :], mask=live[:, None], other=0.0).to(tl.float32)


@triton.jit
def _store_kernel(
    K,
    V,
    Cache,
    SlotMapping,
    Bounds,
    num_tokens,
    num_slots,
    stride_sm,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_blk,
    Positions,
    stride_pos,
    KeyGain,
    KeyOffset,
    KeyFirstOffset,
    ValueGain,
    ValueOffset,
    ValueFirstOffset,
    VBounds,
    KCentroids,
    VCentroids,
    BLOCK_SIZE: tl.constexpr,
    HEAD_STRIDE: tl.constexpr,
    KEY_OFF: tl.constexpr,
    KEY_BYTES: tl.constexpr,
    NORM_OFF: tl.constexpr,
    VAL_OFF: tl.constexpr,
    VAL_BYTES: tl.constexpr,
    SCALE_OFF: tl.constexpr,
    ZERO_OFF: tl.constexpr,
    D: tl.constexpr,
    LOG2_D: tl.constexpr,
    KEY_FP8: tl.constexpr,
    KBITS: tl.constexpr,
    VBITS: tl.constexpr,
    NUM_BOUNDS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    CODE_SEARCH: tl.constexpr = 0,
    CALIBRATED: tl.constexpr = False,
    SYMMETRIC_VALUES: tl.constexpr = False,
    FOLD_NORM: tl.constexpr = False,
    WIDE_OFFSETS: tl.constexpr = False,
):
    """``CALIBRATED``: a calibrated format (docs/format.md): each token's position is read
    from ``Positions`` (position 0 is coded against the first-position offsets), keys and
    values are coded as ``gain * (x - offset)`` with the kv head's calibration vectors
    (contiguous float32 ``[num_kv_heads, D]``), values take the Lloyd-Max code of
    ``VBITS`` bits (boundaries ``VBounds``), or with ``SYMMETRIC_VALUES`` the symmetric code
    (:func:`_symmetric_code`). Otherwise none of those pointers is read.
    ``FOLD_NORM`` (``Preset.folds_norm``): the key norm and (Lloyd-Max) value scale fields
    hold each row's norm over its centroids' norm (float32 centroids ``KCentroids``,
    ``VCentroids``).
    Offsets inside the program's tokens are 32-bit, added to 64-bit scalar bases, unless
    ``WIDE_OFFSETS`` (:func:`wide_offsets`: a row stride times ``BLOCK_T`` could overflow
    them), which makes them 64-bit. Key and value rows are read for every token of the call
    (not only those with a slot), so those loads need no slot."""
    pid_t = tl.program_id(0)
    h = tl.program_id(1).to(tl.int64)
    t0 = pid_t.to(tl.int64) * BLOCK_T
    r = tl.arange(0, BLOCK_T)
    if WIDE_OFFSETS:
        r = r.to(tl.int64)
    live = r < num_tokens - t0
    t = t0 + r
    slot = tl.load(SlotMapping + t0 * stride_sm + r * stride_sm, mask=live, other=-1).to(tl.int64)
    # padding (negative) and slots past the cache are skipped: no token writes outside it
    ok = (slot >= 0) & (slot < num_slots)
    slot = tl.where(ok, slot, 0)
    off = slot % BLOCK_SIZE
    base = Cache + (slot // BLOCK_SIZE) * stride_blk + h * HEAD_STRIDE  # this token's (block, head)
    d = tl.arange(0, D)
    if CALIBRATED:
        # each row's position read into every element of the row, in the tiles' own layout:
        # a [BLOCK_T] vector broadcast over them makes Triton convert layouts for it
        # (docs/perf/runs/2026-12-06-store-positions); positions holds one entry per token
        # of the call, so the read needs no slot
        first = tl.load(Positions + (t * stride_pos)[:, None] + d[None, :] * 0, mask=live[:, None], other=1) == 0
        ch = h * D + d

    k = _rows(K, t0 * stride_kt + h * stride_kh, stride_kt, r, live, D)
    # Non-finite inputs (tq_core.codec, docs/overview.md): fp8 keys per element (NaN -> 0,
    # ±inf saturate to ±448); a Lloyd-Max key or a value row with a non-finite element is
    # stored as the zero vector. The rows are recognised from the sum of squares and the
    # min/max the encoder computes anyway, so finite rows cost nothing extra.
    if KEY_FP8:
        # the fp8 cast saturates ±inf (and ±65504) to ±448 by itself: only NaN needs replacing
        k8 = _fp8_e4m3_bits(tl.where(k == k, k, 0.0))
        tl.store(field_ptr(base[:, None], off[:, None], KEY_OFF, KEY_BYTES) + d[None, :], k8, mask=ok[:, None])
    else:
        if CALIBRATED:
            k = _coded(k, first, KeyGain, KeyOffset, KeyFirstOffset, ch)
        codes, norm = _lloyd_max_code(
            k,
            Bounds,
            BLOCK_T,
            D,
            LOG2_D,
            KBITS,
            NUM_BOUNDS,
            CODE_SEARCH,
            Centroids=KCentroids,
            FOLD=FOLD_NORM,
        )
        kptr = field_ptr(base, off, KEY_OFF, KEY_BYTES).to(tl.pointer_type(tl.int32))
        store_codes(kptr, ok, codes, KBITS, D, BLOCK_T)
        nptr = field_ptr(base, off, NORM_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16))
        tl.store(nptr, tl.minimum(norm, FP16_MAX).to(tl.float16), mask=ok)

    v = _rows(V, t0 * stride_vt + h * stride_vh, stride_vt, r, live, D)
    if CALIBRATED and SYMMETRIC_VALUES:
        v = _coded(v, first, ValueGain, ValueOffset, ValueFirstOffset, ch)
        vcodes, vs16 = _symmetric_code(v, BLOCK_T, D, LOG2_D, VBITS)
        vptr = field_ptr(base, off, VAL_OFF, VAL_BYTES).to(tl.pointer_type(tl.int32))
        store_codes(vptr, ok, vcodes, VBITS, D, BLOCK_T)
        tl.store(field_ptr(base, off, SCALE_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16)), vs16, mask=ok)
    elif CALIBRATED:
        v = _coded(v, first, ValueGain, ValueOffset, ValueFirstOffset, ch)
        vcodes, vnorm = _lloyd_max_code(
            v,
            VBounds,
            BLOCK_T,
            D,
            LOG2_D,
            VBITS,
            (1 << VBITS) - 1,
            CODE_SEARCH,
            Centroids=VCentroids,
            FOLD=FOLD_NORM,
        )
        vptr = field_ptr(base, off, VAL_OFF, VAL_BYTES).to(tl.pointer_type(tl.int32))
        store_codes(vptr, ok, vcodes, VBITS, D, BLOCK_T)
        sptr = field_ptr(base, off, SCALE_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16))
        tl.store(sptr, tl.minimum(vnorm, FP16_MAX).to(tl.float16), mask=ok)
    else:
        LEVELS: tl.constexpr = (1 << VBITS) - 1
        # NaN-propagating: a row's min or max is NaN or ±inf exactly when it holds such an
        # element; such a row gets scale 0 and zero 0, so its codes are 0 below
        vmin = tl.reduce(v, 1, _min_nan)
        vmax = tl.reduce(v, 1, _max_nan)
        v_bad = ~((vmin > -FP32_INF) & (vmax < FP32_INF))
        scale16 = tl.where(v_bad, 0.0, tl.minimum((vmax - vmin) / LEVELS, FP16_MAX)).to(tl.float16)
        zero16 = tl.where(v_bad, 0.0, tl.minimum(tl.maximum(vmin, -FP16_MAX), FP16_MAX)).to(tl.float16)
        scale = scale16.to(tl.float32)
        # each code is floor((v - zero) / scale + 0.5), clamped to 0 .. LEVELS: the row's
        # reciprocal scale (0 for scale 0, so that every code is 0) times v - zero, plus 0.5;
        # a NaN (inf * 0) and a negative value clamp to 0 before the truncating conversion
        safe = tl.where(scale > 0, scale, 1.0)
        rcp = tl.where(scale > 0, 1.0 / safe, 0.0)
        qf = tl.maximum((v - zero16.to(tl.float32)[:, None]) * rcp[:, None] + 0.5, 0.0)
        qc = tl.minimum(qf.to(tl.uint32), LEVELS)
        vptr = field_ptr(base, off, VAL_OFF, VAL_BYTES).to(tl.pointer_type(tl.int32))
        store_codes(vptr, ok, qc, VBITS, D, BLOCK_T)
        tl.store(field_ptr(base, off, SCALE_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16)), scale16, mask=ok)
        tl.store(field_ptr(base, off, ZERO_OFF, FP16_BYTES).to(tl.pointer_type(tl.float16)), zero16, mask=ok)


def wide_offsets(block_t: int, *row_strides: int) -> bool:
    """Whether ``_store_kernel`` needs 64-bit offsets inside a program (``WIDE_OFFSETS``): a
    program adds ``r * stride`` for its tokens ``r < block_t`` in 32 bits otherwise, so
    ``block_t`` times the largest of the key, value and slot-mapping row strides (in
    elements) must stay below ``2**31``."""
    return block_t * max(row_strides) >= 1 << 31


def kernel_constexprs(p: Preset, fields: dict[str, Any], cfg: StoreConfig, wide: bool = False) -> dict[str, Any]:
    """``_store_kernel``'s compile-time arguments for preset ``p``, its cache ``fields``
    (``KernelFields.constexprs()``) and launch parameters ``cfg``; ``wide``:
    :func:`wide_offsets` of the call's strides."""
    return dict(
        fields,
        NUM_BOUNDS=0 if p.key_is_fp8 else (1 << p.key_bits) - 1,
        BLOCK_T=cfg.block_t,
        CODE_SEARCH=cfg.code_search,
        CALIBRATED=p.calibrated,
        SYMMETRIC_VALUES=p.value_kind == "symmetric",
        FOLD_NORM=p.folds_norm,
        WIDE_OFFSETS=wide,
    )


def store(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    preset: str | Preset,
    *,
    config: StoreConfig | None = None,
    calibration: LayerCalibration | None = None,
    positions: torch.Tensor | None = None,
) -> None:
    """Encode ``key``/``value`` ``[num_tokens, num_kv_heads, head_dim]`` into ``kv_cache`` at
    ``slot_mapping``. Same contract as ``tq_core.store``.

    ``slot_mapping`` is read through its stride (a view such as ``t[::2]`` is fine). Tokens
    whose slot is negative (padding) or ``>= num_blocks * block_size`` are skipped inside
    the kernel, so no slot value writes outside ``kv_cache``; ``TQ_DEBUG=1`` raises
    ``RangeError`` for a slot past the cache instead (a host sync). A slot that appears
    twice in one call raises ``RangeError`` under ``TQ_DEBUG=1``; without it, which of the
    tokens' bytes land in that slot is undefined (possibly a mix of their fields), and
    still nothing is written outside the cache.

    A calibrated format needs the layer's ``calibration`` and each token's ``positions``
    (read through its stride), as ``tq_core.store`` does; a token is coded against the
    first-position offsets exactly where its position is 0 (a negative position, which
    ``TQ_DEBUG=1`` rejects, counts as any other non-zero one).
    """
    args = check_store_args(
        key,
        value,
        kv_cache,
        slot_mapping,
        preset,
        check_values=debug_enabled(),
        calibration=calibration,
        positions=positions,
    )
    check_runnable(key.device)
    n, h, d = key.shape
    if n == 0:
        return
    if key.stride(2) != 1:
        key = key.contiguous()
    if value.stride(2) != 1:
        value = value.contiguous()
    p = args.preset
    kcent, bounds = (dummy(key.device),) * 2 if p.key_is_fp8 else cached_codebook(p, d, key.device)[:2]
    cfg = config or store_config(key.device, p.name)
    wide = wide_offsets(cfg.block_t, key.stride(0), value.stride(0), slot_mapping.stride(0))
    grid = (triton.cdiv(n, cfg.block_t), h)
    if p.calibrated:
        assert calibration is not None and args.positions is not None  # check_store_args requires them
        cal = (args.positions, args.positions.stride(0), *calibration.kernel_vectors())
        if p.value_kind == "symmetric":
            vbounds = vcent = dummy(key.device)  # the codes are computed: no table
        else:
            vbounds, _, vcent = cached_value_codebook(p, d, key.device)
    else:
        cal = (dummy(key.device), 0, *(dummy(key.device),) * 6)
        vbounds = vcent = dummy(key.device)
    if cfg.code_search == 2:
        # the bins' tables take the boundaries' place; a codebook without one is searched
        kbins = bounds if p.key_is_fp8 else cached_bins(p, d, key.device, "key")
        lloyd_values = p.calibrated and p.value_kind == "lloyd_max"
        vbins = cached_bins(p, d, key.device, "value") if lloyd_values else vbounds
        if kbins is None or vbins is None:
            cfg = replace(cfg, code_search=1)
        else:
            bounds, vbounds = kbins, vbins
    _store_kernel[grid](
        key,
        value,
        kv_cache,
        slot_mapping,
        bounds,
        n,
        args.num_slots,
        slot_mapping.stride(0),
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        kv_cache.stride(0),
        *cal,
        vbounds,
        kcent,
        vcent,
        **kernel_constexprs(p, args.fields.constexprs(), cfg, wide),
        num_warps=cfg.num_warps,
        **launch_options(key.device),
        **({"maxnreg": cfg.max_registers} if cfg.max_registers and nvidia(key.device) else {}),
    )
