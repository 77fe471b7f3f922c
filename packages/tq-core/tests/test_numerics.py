"""Non-finite and overflowing inputs: what the store keeps and what attention returns.

The rule (docs/overview.md, "Non-finite inputs"): key and value elements are replaced
before encoding as ``torch.nan_to_num(x, nan=0, posinf=65504, neginf=-65504)`` in
float32, then each field saturates to its format (fp8 keys ±448, fp16 norm / scale /
zero ±65504). A query row with a non-finite element gives a NaN output row for that
(row, q head) only. Expected bytes here come from that rule applied with torch, or by
hand through ``struct`` (tqc_helpers), never from the codec's own replacement.
"""

from __future__ import annotations

import pytest
import torch
from tqc_helpers import PRESET_NAMES, fp16_bytes, pack_int, slot_fields

import tq_core
from tq_core import decode_kv, encode_kv, get_preset
from tq_core.testing import paged_batch

NAN, INF = float("nan"), float("inf")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def rule(x: torch.Tensor) -> torch.Tensor:
    """The documented replacement, spelled out with torch (float32 first: bf16 has no 65504)."""
    return torch.nan_to_num(x.float(), nan=0.0, posinf=65504.0, neginf=-65504.0)


def quarters(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Multiples of 1/4 in [-2, 2]: exact in every input dtype."""
    return torch.randint(-8, 9, shape, generator=gen).float() / 4


def poison(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A copy of ``x`` ``[n >= 6, H, d]`` with NaN, +inf and -inf at fixed and random places."""
    x = x.clone()
    x[0, :, 0] = NAN
    x[1, :, 1] = INF
    x[2, :, 2] = -INF
    x[3, 0, :3] = torch.tensor([NAN, INF, -INF])
    x[4] = NAN  # a whole token of NaN
    x[5] = INF  # a whole token of +inf (value range 0: scale 0)
    pick = torch.rand(x.shape, generator=gen)
    x[pick < 0.02] = NAN
    x[(pick >= 0.02) & (pick < 0.03)] = INF
    x[(pick >= 0.03) & (pick < 0.04)] = -INF
    return x


# ---------------------------------------------------------------- store / encode


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
def test_non_finite_tokens_encode_as_the_rule_says(gen, name, dtype, d):
    k = poison(quarters(gen, 10, 3, d), gen).to(dtype)
    v = poison(quarters(gen, 10, 3, d), gen).to(dtype)
    assert not torch.isfinite(k).all() and not torch.isfinite(v).all()
    got = encode_kv(k, v, name)
    expected = encode_kv(rule(k), rule(v), name)
    assert torch.equal(got, expected), "slot bytes differ from encoding nan_to_num(input)"
    dk, dv = decode_kv(got, name, d)
    assert torch.isfinite(dk).all() and torch.isfinite(dv).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_store_of_non_finite_tokens_writes_the_rule_bytes(gen, dtype):
    # the paged store goes through the same encode: one Lloyd-Max and the fp8 preset
    for name in ("turboquant_k8v4", "turboquant_k3v4_nc"):
        d, bs, h = 64, 16, 2
        k = poison(quarters(gen, 12, h, d), gen).to(dtype)
        v = poison(quarters(gen, 12, h, d), gen).to(dtype)
        slot = get_preset(name).layout(d).slot_size_aligned
        cache = torch.randint(0, 256, (3, bs, h, slot), generator=gen, dtype=torch.uint8)
        ref = cache.clone()
        slots = torch.randperm(3 * bs, generator=gen)[:12]
        tq_core.store(k, v, cache, slots, name)
        tq_core.store(rule(k), rule(v), ref, slots, name)
        assert torch.equal(cache, ref), name


def test_fp8_key_and_value_fields_by_hand():
    d = 64
    key = torch.zeros(1, 1, d)
    key[0, 0, :4] = torch.tensor([NAN, INF, -INF, 1.0])
    value = torch.zeros(1, 1, d)
    value[0, 0, :3] = torch.tensor([NAN, INF, -INF])
    f = slot_fields(encode_kv(key, value, "turboquant_k8v4")[0, 0], "turboquant_k8v4", d)
    # e4m3fn: 0 -> 0x00, ±448 (the largest finite) -> 0x7E / 0xFE, 1.0 -> 0x38
    assert f["key"] == [0x00, 0x7E, 0xFE, 0x38] + [0] * (d - 4)
    # values [0, 65504, -65504, 0, ...]: zero = -65504, scale = fp16(131008 / 15) = 8736
    assert f["zero"] == fp16_bytes(-65504.0)
    assert f["scale"] == fp16_bytes(8736.0)
    # codes floor((v + 65504) / 8736 + 1/2): 0 -> 7, 65504 -> 15, -65504 -> 0
    assert f["value"] == pack_int([7, 15, 0] + [7] * (d - 3), 4)


@pytest.mark.parametrize("name", ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_lloyd_max_norm_fields_by_hand(name):
    d = 128
    key = torch.zeros(4, 1, d)
    key[0, 0, 5] = INF  # -> 65504 e_5: norm 65504
    key[1, 0, 9] = -INF
    key[2, 0, 3] = NAN  # -> the zero vector: norm 0
    key[3] = NAN
    slots = encode_kv(key, torch.zeros(4, 1, d), name)
    norms = [slot_fields(slots[i, 0], name, d)["norm"] for i in range(4)]
    assert norms == [fp16_bytes(65504.0)] * 2 + [fp16_bytes(0.0)] * 2
    dk, _ = decode_kv(slots, name, d)
    assert torch.isfinite(dk).all()
    assert (dk[2:] == 0).all()
    # the saturated keys decode to norm 65504 pointing along ±e_5 / ±e_9
    torch.testing.assert_close(torch.linalg.vector_norm(dk[:2, 0], dim=-1), torch.full((2,), 65504.0))
    assert int(dk[0, 0].argmax()) == 5 and int(dk[1, 0].argmin()) == 9


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_huge_finite_keys_and_values_saturate(gen, name):
    d = 64
    signs = torch.where(torch.rand(3, 1, d, generator=gen) < 0.5, -1.0, 1.0)
    # fp16 keys at ±60000 (norm 480000); fp32 keys at ±1e30 (the float32 norm overflows)
    k16 = (signs * 60000.0).to(torch.float16)
    k32 = signs * 1e30
    levels = (1 << get_preset(name).value_bits) - 1
    v16 = (signs * 60000.0).to(torch.float16)  # range 120000: scale 120000 / levels, zero -60000
    v32 = signs * 1e6  # range 2e6: scale saturates at 65504, zero at -65504
    for k, v, scale, zero in ((k16, v16, 120000.0 / levels, -60000.0), (k32, v32, 65504.0, -65504.0)):
        slots = encode_kv(k, v, name)
        dk, dv = decode_kv(slots, name, d)
        assert torch.isfinite(dk).all() and torch.isfinite(dv).all()
        for i in range(3):
            f = slot_fields(slots[i, 0], name, d)
            if get_preset(name).key_is_fp8:
                assert f["key"] == [0x7E if s > 0 else 0xFE for s in signs[i, 0].tolist()]
            else:
                assert f["norm"] == fp16_bytes(65504.0)
            assert f["scale"] == fp16_bytes(scale)
            assert f["zero"] == fp16_bytes(zero)
        if not get_preset(name).key_is_fp8:
            torch.testing.assert_close(torch.linalg.vector_norm(dk[:, 0], dim=-1), torch.full((3,), 65504.0))
        # values decode inside zero .. zero + levels * scale (codes clamp at the ends)
        assert dv.min() >= zero and dv.max() <= zero + levels * scale * 1.001


# ---------------------------------------------------------------- attention


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_attention_over_a_cache_stored_from_non_finite_tokens_is_finite(gen, name):
    d = 64
    # request 0: 4 verify rows; its last token (position 18) is poisoned, so rows 0-2
    # do not attend to it and still read its block (0 * NaN would reach them)
    case = paged_batch(gen, name, [19, 33], [4, 1], head_dim=d, num_kv_heads=2, group=2)
    k, v = case.key.clone(), case.value.clone()
    k[18] = NAN
    v[18, 0] = NAN
    v[18, 1] = INF
    k[19 + 5, 1, :7] = INF
    k[19 + 6, 0, :7] = -INF
    v[19 + 7, :, 3] = -INF
    k[19 + 8, :, ::3] = NAN
    sanitized = case.kv_cache.clone()
    tq_core.store(k, v, case.kv_cache, case.slot_mapping, name)
    tq_core.store(rule(k), rule(v), sanitized, case.slot_mapping, name)
    out = tq_core.attention(*case.args())
    assert torch.isfinite(out).all()
    expected = tq_core.attention(case.query, sanitized, *case.args()[2:])
    assert torch.equal(out, expected)


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_non_finite_query_element_gives_nan_in_its_row_and_head_only(gen, name, dtype):
    case = paged_batch(gen, name, [21, 40], [3, 2], head_dim=64, num_kv_heads=2, group=4, dtype=dtype)
    clean = tq_core.attention(*case.args())
    assert torch.isfinite(clean).all()
    bad = [(0, 1, NAN), (2, 4, INF), (3, 0, -INF), (4, 7, NAN)]  # (row, q head, value)
    q = case.query.clone()
    for row, head, x in bad:
        q[row, head, (7 * row + head) % 64] = x
    out = tq_core.attention(q, *case.args()[1:])
    hit = torch.zeros(out.shape[:2], dtype=torch.bool)
    for row, head, _ in bad:
        hit[row, head] = True
    assert torch.isnan(out[hit]).all(), "a poisoned (row, head) has a non-NaN element"
    assert torch.isfinite(out[~hit]).all()
    # the other (row, head) pairs, including heads sharing the kv head, are unchanged
    torch.testing.assert_close(out[~hit], clean[~hit], atol=1e-6, rtol=1e-6)
