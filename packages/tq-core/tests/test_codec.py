"""encode_kv / decode_kv: hand-built bytes, an independent key codec, and error statistics."""

from __future__ import annotations

import math

import pytest
import torch
from tqc_helpers import LM_PRESETS, PRESET_NAMES, fp16_bytes, kron_hadamard, pack_int, randn, slot_fields

import tq_core
from tq_core import decode_kv, encode_kv, get_codebook, get_preset

# ---------------------------------------------------------------- values, hand-built


@pytest.mark.parametrize("name", ["turboquant_k8v4", "turboquant_k3v4_nc"])
def test_value_row_0_to_15_gives_scale_one(name):
    d = 128
    v = torch.arange(16, dtype=torch.float32).repeat(d // 16).view(1, 1, d)
    slot = encode_kv(torch.ones(1, 1, d), v, name)[0, 0]
    f = slot_fields(slot, name, d)
    assert f["scale"] == [0x00, 0x3C]  # fp16 1.0
    assert f["zero"] == [0x00, 0x00]  # fp16 0.0
    assert f["value"] == [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE] * 8
    assert torch.equal(decode_kv(slot.view(1, 1, -1), name, d)[1], v)


def test_value_row_with_inexact_scale():
    """min -1, max 2 at 4 bits: scale 3/15 = 0.2 -> fp16 0x3266 (0.199951171875), zero -1 -> 0xBC00.

    Codes use the stored fp16 scale: floor((v + 1) / 0.199951171875 + 1/2):
    -1 -> 0, 2 -> 15 (15.004 rounds down), 0 -> 5, 1 -> 10.
    """
    d = 64
    v = torch.zeros(1, 1, d)
    v[0, 0, :4] = torch.tensor([-1.0, 2.0, 0.0, 1.0])
    name = "turboquant_4bit_nc"
    slot = encode_kv(torch.ones(1, 1, d), v, name)[0, 0]
    f = slot_fields(slot, name, d)
    assert f["scale"] == [0x66, 0x32] == fp16_bytes(0.2)
    assert f["zero"] == [0x00, 0xBC] == fp16_bytes(-1.0)
    assert f["value"] == [0xF0, 0xA5] + [0x55] * 30
    s16 = 0.199951171875
    expected = torch.full((d,), -1.0 + 5 * s16)
    expected[:4] = torch.tensor([-1.0, -1.0 + 15 * s16, -1.0 + 5 * s16, -1.0 + 10 * s16])
    torch.testing.assert_close(decode_kv(slot.view(1, 1, -1), name, d)[1][0, 0], expected, rtol=0, atol=1e-7)


def test_value_row_3bit():
    d = 64
    v = torch.arange(8, dtype=torch.float32).repeat(d // 8).view(1, 1, d)
    name = "turboquant_3bit_nc"
    f = slot_fields(encode_kv(torch.ones(1, 1, d), v, name)[0, 0], name, d)
    assert f["scale"] == fp16_bytes(1.0) and f["zero"] == fp16_bytes(0.0)
    assert f["value"] == [0x88, 0xC6, 0xFA] * 8  # codes 0..7 -> 0xFAC688 little-endian


def test_value_rounding_is_half_up():
    """A value exactly half-way between two levels takes the upper one (floor(x + 1/2))."""
    d = 64
    v = torch.zeros(1, 1, d)
    v[0, 0, 1] = 15.0  # scale 1, zero 0
    v[0, 0, 2] = 2.5
    v[0, 0, 3] = 7.5
    name = "turboquant_4bit_nc"
    _, v_hat = decode_kv(encode_kv(torch.ones(1, 1, d), v, name), name, d)
    assert v_hat[0, 0, :4].tolist() == [0.0, 15.0, 3.0, 8.0]


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("c", [3.25, -1000.0, 0.0, 65504.0])
def test_constant_value_row_exact(name, c):
    d = 128
    v = torch.full((2, 3, d), c)
    slots = encode_kv(randn(torch.Generator().manual_seed(1), 2, 3, d), v, name)
    f = slot_fields(slots[1, 2], name, d)
    assert f["scale"] == [0, 0] and f["zero"] == fp16_bytes(c)
    assert set(f["value"]) == {0}
    _, v_hat = decode_kv(slots, name, d)
    assert torch.equal(v_hat, v)


# ---------------------------------------------------------------- fp8 keys, hand-built

FP8_BYTES = {
    1.0: 0x38,
    -1.0: 0xB8,
    0.5: 0x30,
    2.0: 0x40,
    1.125: 0x39,
    240.0: 0x77,
    448.0: 0x7E,
    -448.0: 0xFE,
    1e6: 0x7E,  # saturates at the largest finite e4m3 value
    -1e6: 0xFE,
    math.inf: 0x7E,
    0.0: 0x00,
    2.0**-9: 0x01,  # smallest subnormal
}


def test_fp8_key_bytes():
    d = 64
    vals = list(FP8_BYTES)
    k = torch.zeros(1, 1, d)
    k[0, 0, : len(vals)] = torch.tensor(vals)
    name = "turboquant_k8v4"
    slot = encode_kv(k, torch.zeros(1, 1, d), name)[0, 0]
    f = slot_fields(slot, name, d)
    assert "norm" not in f
    assert f["key"][: len(vals)] == list(FP8_BYTES.values())
    assert set(f["key"][len(vals) :]) == {0}
    k_hat, _ = decode_kv(slot.view(1, 1, -1), name, d)
    assert torch.isfinite(k_hat).all()
    expected = [max(-448.0, min(448.0, x)) for x in vals]
    assert k_hat[0, 0, : len(vals)].tolist() == expected


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fp8_saturates_for_every_input_dtype(dtype):
    k = torch.full((1, 1, 64), -60000.0 if dtype == torch.float16 else -1e30).to(dtype)
    k_hat, _ = decode_kv(encode_kv(k, torch.zeros(1, 1, 64, dtype=dtype), "turboquant_k8v4"), "turboquant_k8v4", 64)
    assert torch.equal(k_hat, torch.full((1, 1, 64), -448.0))


# ---------------------------------------------------------------- Lloyd-Max keys, hand-built


def test_key_along_e0_has_flat_rotation():
    """H e_0 = (1, ..., 1) / sqrt(d): every unit coordinate is 1.0 in 1/sqrt(d) units.

    3 bits: 1.0 lies between centroids 0.7560 (code 5) and 1.3439 (code 6), below their
    midpoint 1.0500, so every code is 5; eight 5s pack to 0xB6DB6D -> 6D DB B6.
    4 bits: between 0.9423 (code 11) and 1.2562, below 1.0993 -> 0xBB.
    The norm is 2.5 -> fp16 0x4100. With norm correction the decoded key is exactly 2.5 e_0.
    """
    d = 128
    k = torch.zeros(1, 1, d)
    k[0, 0, 0] = 2.5
    expected_key = {3: [0x6D, 0xDB, 0xB6] * 16, 4: [0xBB] * 64}
    for name in LM_PRESETS:
        slot = encode_kv(k, torch.zeros(1, 1, d), name)[0, 0]
        f = slot_fields(slot, name, d)
        assert f["key"] == expected_key[get_preset(name).key_bits], name
        assert f["norm"] == [0x00, 0x41] == fp16_bytes(2.5)
        k_hat, _ = decode_kv(slot.view(1, 1, -1), name, d)
        torch.testing.assert_close(k_hat, k, rtol=0, atol=1e-6)


def test_key_along_e1_alternates_codes():
    """H e_1 alternates +1, -1 (Sylvester order): 3-bit codes 5, 2, 5, 2, ..."""
    d = 64
    k = torch.zeros(1, 1, d)
    k[0, 0, 1] = -0.75
    name = "turboquant_k3v4_nc"
    f = slot_fields(encode_kv(k, torch.zeros(1, 1, d), name)[0, 0], name, d)
    assert f["key"] == pack_int([2, 5] * (d // 2), 3)  # negative key flips the signs
    assert f["norm"] == fp16_bytes(0.75)


@pytest.mark.parametrize("name", LM_PRESETS)
def test_zero_key_is_finite_zero(name):
    d = 128
    slots = encode_kv(torch.zeros(2, 1, d), torch.zeros(2, 1, d), name)
    assert slot_fields(slots[0, 0], name, d)["norm"] == [0, 0]
    k_hat, v_hat = decode_kv(slots, name, d)
    assert torch.equal(k_hat, torch.zeros(2, 1, d)) and torch.equal(v_hat, torch.zeros(2, 1, d))


@pytest.mark.parametrize("name", LM_PRESETS)
def test_huge_key_norm_saturates_finite(name):
    k = torch.full((1, 1, 64), 1e5)  # norm 8e5 > fp16 max
    k_hat, _ = decode_kv(encode_kv(k, torch.zeros(1, 1, 64), name), name, 64)
    assert torch.isfinite(k_hat).all()
    torch.testing.assert_close(k_hat.norm(), torch.tensor(65504.0), rtol=1e-5, atol=0)


# ---------------------------------------------------------------- independent key codec


def _reference_keys(key: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Independent Lloyd-Max key codec: explicit Hadamard matrix, argmin nearest centroid.

    Returns (codes, distance of each rotated coordinate to its nearest boundary, decoded key).
    """
    p = get_preset(name)
    d = key.shape[-1]
    h = kron_hadamard(d)
    k = key.double()
    norm = k.norm(dim=-1, keepdim=True)
    y = (k / norm) @ h.T
    cent = torch.tensor(get_codebook(p.key_bits).centroids, dtype=torch.float64) / math.sqrt(d)
    dist = (y[..., None] - cent).abs()
    codes = dist.argmin(-1)
    bounds = (cent[1:] + cent[:-1]) / 2
    gap = (y[..., None] - bounds).abs().amin(-1)
    c = cent[codes]
    c = c / c.norm(dim=-1, keepdim=True)  # norm correction
    norm16 = norm.to(torch.float16).double()
    return codes, gap, (norm16 * c) @ h.T


@pytest.mark.parametrize("name", LM_PRESETS)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_lm_keys_match_independent_codec(gen, name, d):
    n, heads = 37, 3
    key = randn(gen, n, heads, d) * torch.exp(randn(gen, d))  # uneven channel scales
    slots = encode_kv(key, randn(gen, n, heads, d), name)
    lay = get_preset(name).layout(d)
    codes = tq_core.bitpack.unpack_codes(slots[..., : lay.key_code_bytes], lay.key_bits, d)
    ref_codes, gap, ref_key = _reference_keys(key, name)
    differ = codes != ref_codes
    # fp32 vs fp64 rotation may only disagree on coordinates that sit on a boundary
    assert bool((gap[differ] < 1e-6).all()), gap[differ]
    assert differ.float().mean() < 1e-3
    rows_ok = ~differ.any(-1)
    k_hat, _ = decode_kv(slots, name, d)
    # rtol: the fp32 and fp64 norms may round to neighbouring fp16 values (one ulp, 2^-11)
    atol = 2e-5 * float(key.abs().max())
    torch.testing.assert_close(k_hat[rows_ok].double(), ref_key[rows_ok], rtol=2.0**-10, atol=atol)
    norms = slots[..., lay.norm_offset : lay.norm_offset + 2].contiguous().view(torch.float16).squeeze(-1)
    assert torch.equal(norms, key.norm(dim=-1).to(torch.float16))


# ---------------------------------------------------------------- statistics per preset


@pytest.mark.parametrize("name", LM_PRESETS)
def test_lm_key_unit_mse_near_theory(gen, name):
    """Mean E||x - x_hat||^2 of random unit keys at d=128 sits just under the Gaussian figure.

    The Gaussian codebook on the (slightly lighter-tailed) exact coordinate law, with norm
    correction, measures 3-5% below the figure; 8,192 vectors put the noise near 0.3%.
    """
    d = 128
    key = randn(gen, 4096, 2, d) * torch.exp(0.5 * randn(gen, d))
    k_hat, _ = decode_kv(encode_kv(key, torch.zeros_like(key), name), name, d)
    norm = key.double().norm(dim=-1, keepdim=True)
    mse = float(((key.double() - k_hat.double()) / norm).pow(2).sum(-1).mean())
    theory = tq_core.distortion(get_preset(name).key_bits)
    assert 0.90 * theory < mse < 1.0 * theory, (mse, theory)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_value_mse_is_uniform_quantization_noise(gen, name):
    """Per row MSE = scale^2 / 12 (uniform rounding), except the two exact endpoints of each row."""
    d = 128
    v = randn(gen, 2048, 2, d) * torch.exp(randn(gen, 2048, 2, 1)) + randn(gen, 2048, 2, 1)
    slots = encode_kv(torch.ones_like(v), v, name)
    lay = get_preset(name).layout(d)
    scale = slots[..., lay.scale_offset : lay.scale_offset + 2].contiguous().view(torch.float16).float()
    _, v_hat = decode_kv(slots, name, d)
    err = (v.double() - v_hat.double()).pow(2).mean(-1, keepdim=True)
    expected = scale.double().pow(2) / 12 * (d - 2) / d
    ratio = float(err.mean() / expected.mean())
    assert 0.93 < ratio < 1.07, ratio
    rel = float((v - v_hat).norm() / v.norm())
    assert rel < {3: 0.25, 4: 0.12}[get_preset(name).value_bits]


def test_fp8_key_relative_error(gen):
    d = 128
    k = randn(gen, 1024, 2, d) * 10
    k_hat, _ = decode_kv(encode_kv(k, torch.zeros_like(k), "turboquant_k8v4"), "turboquant_k8v4", d)
    normal = k.abs() >= 2.0**-6
    rel = ((k - k_hat).abs() / k.abs())[normal]
    assert float(rel.max()) <= 2.0**-4
    assert 0.01 < float(rel.mean()) < 0.03  # uniform in the mantissa step: ~ 2^-4 / 3 on average
    # exactly what torch's e4m3 cast gives for in-range keys
    assert torch.equal(k_hat, k.to(torch.float8_e4m3fn).float())


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_input_dtypes_encode_like_float32(gen, name, dtype):
    k, v = randn(gen, 5, 2, 64, dtype=dtype), randn(gen, 5, 2, 64, dtype=dtype)
    assert torch.equal(encode_kv(k, v, name), encode_kv(k.float(), v.float(), name))


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_encode_decode_shapes_and_dtypes(gen, name):
    d = 256
    k, v = randn(gen, 3, 5, d), randn(gen, 3, 5, d)
    slots = encode_kv(k, v, get_preset(name))
    assert slots.dtype == torch.uint8 and slots.shape == (3, 5, get_preset(name).layout(d).slot_size_aligned)
    k_hat, v_hat = decode_kv(slots, name, d)
    assert k_hat.dtype == v_hat.dtype == torch.float32
    assert k_hat.shape == v_hat.shape == (3, 5, d)
    # tokens and heads are encoded independently
    assert torch.equal(encode_kv(k[1:2, 3:4], v[1:2, 3:4], name), slots[1:2, 3:4])
    # empty input
    assert encode_kv(k[:0], v[:0], name).shape == (0, 5, slots.shape[-1])


def test_decode_accepts_non_contiguous_slots(gen):
    name, d = "turboquant_k3v4_nc", 128
    slots = encode_kv(randn(gen, 6, 4, d), randn(gen, 6, 4, d), name)
    strided = slots.transpose(0, 1).contiguous().transpose(0, 1)
    for a, b in zip(decode_kv(strided, name, d), decode_kv(slots, name, d), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_attention_uses_decode_kv(gen, name):
    """A single cached token: attention returns exactly that token's decoded value for every q head."""
    d, hk, group, bs = 128, 2, 4, 16
    k, v = randn(gen, 1, hk, d) * 3, randn(gen, 1, hk, d)
    slot = int(torch.randint(0, 3, (1,), generator=gen)) * bs  # position 0 sits at offset 0 of its block
    cache = torch.zeros(3, bs, hk, get_preset(name).layout(d).slot_size_aligned, dtype=torch.uint8)
    tq_core.store(k, v, cache, torch.tensor([slot]), name)
    q = randn(gen, 1, hk * group, d) * 5
    out = tq_core.attention(
        q,
        cache,
        torch.tensor([[slot // bs]], dtype=torch.int32),
        torch.tensor([1], dtype=torch.int32),
        torch.tensor([0, 1], dtype=torch.int32),
        name,
        1 / math.sqrt(d),
    )
    _, v_hat = decode_kv(encode_kv(k, v, name), name, d)
    assert torch.equal(out[0], v_hat[0].repeat_interleave(group, 0))


# ---------------------------------------------------------------- shared tables


@pytest.mark.parametrize("name", LM_PRESETS)
def test_editing_key_codebook_changes_no_later_encode(gen, name):
    d = 128
    k, v = randn(gen, 4, 2, d), randn(gen, 4, 2, d)
    slots = encode_kv(k, v, name)
    decoded = decode_kv(slots, name, d)
    expected_cent = torch.tensor(get_codebook(get_preset(name).key_bits).centroids, dtype=torch.float64) / math.sqrt(d)
    cent, bounds = tq_core.key_codebook(name, d)
    cent.mul_(-7.0)
    bounds.fill_(0.0)
    assert torch.equal(encode_kv(k, v, name), slots)
    for a, b in zip(decode_kv(slots, name, d), decoded, strict=True):
        assert torch.equal(a, b)
    again, _ = tq_core.key_codebook(name, d)
    assert torch.allclose(again.double(), expected_cent, rtol=1e-6, atol=0)
