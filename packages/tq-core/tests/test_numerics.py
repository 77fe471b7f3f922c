"""Non-finite and overflowing inputs: what the store keeps and what attention returns.

The rule (docs/overview.md, "Non-finite inputs"): a value token (one head's vector)
holding a NaN or ±inf is stored as the zero vector, and so is a Lloyd-Max key whose float32
sum of squares is not finite, with every key code 0; an fp8 key maps NaN elements to 0 and
saturates ±inf at ±448. Finite fields saturate to their format (fp8 keys ±448, fp16 norm /
scale / zero ±65504). A query row with a non-finite element gives a NaN output row for
that (row, q head) only. Expected bytes here come from that rule applied with torch, or by
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


def bad_key_rows(k: torch.Tensor) -> torch.Tensor:
    """Lloyd-Max keys stored as zero: the float32 sum of squares is not finite."""
    return ~torch.isfinite((k.float() ** 2).sum(-1))


def rule_keys(k: torch.Tensor, name: str) -> torch.Tensor:
    """The documented replacement of keys, spelled out with torch (float32)."""
    k = k.float()
    if get_preset(name).key_is_fp8:
        return torch.nan_to_num(k, nan=0.0)  # ±inf: the fp8 conversion saturates at ±448
    return torch.where(bad_key_rows(k)[..., None], torch.zeros_like(k), k)


def rule_values(v: torch.Tensor) -> torch.Tensor:
    v = v.float()
    return torch.where(torch.isfinite(v).all(-1, keepdim=True), v, torch.zeros_like(v))


def rule_slots(k: torch.Tensor, v: torch.Tensor, name: str) -> torch.Tensor:
    """The slot bytes the rule gives: the replaced tokens encoded, with the key codes of
    replaced Lloyd-Max keys set to 0 (a zero key's own codes would be the middle ones)."""
    slots = encode_kv(rule_keys(k, name), rule_values(v), name)
    if not get_preset(name).key_is_fp8:
        lay = get_preset(name).layout(k.shape[-1])
        slots[..., lay.key_offset : lay.key_offset + lay.key_code_bytes][bad_key_rows(k)] = 0
    return slots


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
    assert torch.equal(got, rule_slots(k, v, name)), "slot bytes differ from the rule's"
    dk, dv = decode_kv(got, name, d)
    assert torch.isfinite(dk).all() and torch.isfinite(dv).all()
    # replaced tokens decode to exactly 0
    assert (dv[~torch.isfinite(v.float()).all(-1)] == 0).all()
    if not get_preset(name).key_is_fp8:
        assert (dk[bad_key_rows(k)] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_store_of_non_finite_tokens_writes_the_rule_bytes(gen, dtype):
    # the paged store writes the same fields (read back in slot order): one Lloyd-Max and
    # the fp8 preset
    for name in ("turboquant_k8v4", "turboquant_k3v4_nc"):
        d, bs, h = 64, 16, 2
        k = poison(quarters(gen, 12, h, d), gen).to(dtype)
        v = poison(quarters(gen, 12, h, d), gen).to(dtype)
        slot = get_preset(name).layout(d).slot_size_aligned
        cache = torch.randint(0, 256, (3, bs, h, slot), generator=gen, dtype=torch.uint8)
        slots = torch.randperm(3 * bs, generator=gen)[:12]
        tq_core.store(k, v, cache, slots, name)
        slot_bytes = tq_core.to_vllm_cache(cache, name).view(3 * bs, h, slot)[slots]
        assert torch.equal(slot_bytes, rule_slots(k, v, name)), name


def test_fp8_key_and_value_fields_by_hand():
    d = 64
    key = torch.zeros(1, 1, d)
    key[0, 0, :4] = torch.tensor([NAN, INF, -INF, 1.0])
    value = torch.zeros(2, 1, d)
    value[0, 0, :3] = torch.tensor([NAN, INF, -INF])
    value[1, 0, :3] = torch.tensor([60000.0, -60000.0, 1.0])
    slots = encode_kv(key.expand(2, 1, d), value, "turboquant_k8v4")
    f = slot_fields(slots[0, 0], "turboquant_k8v4", d)
    # e4m3fn: 0 -> 0x00, ±448 (the largest finite) -> 0x7E / 0xFE, 1.0 -> 0x38
    assert f["key"] == [0x00, 0x7E, 0xFE, 0x38] + [0] * (d - 4)
    # a value with NaN or ±inf: zero 0, scale 0, codes 0
    assert f["zero"] == fp16_bytes(0.0) and f["scale"] == fp16_bytes(0.0)
    assert f["value"] == [0] * len(f["value"])
    # a finite one: zero = -60000, scale = fp16(120000 / 15) = 8000, codes
    # floor((v + 60000) / 8000 + 1/2): 60000 -> 15, -60000 -> 0, 1 and 0 -> 8
    f = slot_fields(slots[1, 0], "turboquant_k8v4", d)
    assert f["zero"] == fp16_bytes(-60000.0) and f["scale"] == fp16_bytes(8000.0)
    assert f["value"] == pack_int([15, 0, 8] + [8] * (d - 3), 4)


@pytest.mark.parametrize("name", ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_lloyd_max_norm_fields_by_hand(name):
    d = 128
    key = torch.ones(5, 1, d)
    key[0, 0, 5] = INF  # each of the first four: the zero vector, norm 0, codes 0
    key[1, 0, 9] = -INF
    key[2, 0, 3] = NAN
    key[3] = NAN
    key[4, 0, 5] = 70000.0  # finite: norm sqrt(70000^2 + 127) saturates at 65504
    slots = encode_kv(key, torch.zeros(5, 1, d), name)
    fields = [slot_fields(slots[i, 0], name, d) for i in range(5)]
    assert [f["norm"] for f in fields] == [fp16_bytes(0.0)] * 4 + [fp16_bytes(65504.0)]
    assert all(f["key"] == [0] * len(f["key"]) for f in fields[:4])
    dk, _ = decode_kv(slots, name, d)
    assert torch.isfinite(dk).all()
    assert (dk[:4] == 0).all()
    torch.testing.assert_close(torch.linalg.vector_norm(dk[4, 0], dim=-1), torch.tensor(65504.0))
    assert int(dk[4, 0].argmax()) == 5


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_huge_finite_keys_and_values_saturate(gen, name):
    d = 64
    signs = torch.where(torch.rand(3, 1, d, generator=gen) < 0.5, -1.0, 1.0)
    # fp16 keys at ±60000 (norm 480000, saturates); fp32 keys at ±1e30: the float32 sum of
    # squares overflows, so a Lloyd-Max key is stored as the zero vector
    k16 = (signs * 60000.0).to(torch.float16)
    k32 = signs * 1e30
    levels = (1 << get_preset(name).value_bits) - 1
    v16 = (signs * 60000.0).to(torch.float16)  # range 120000: scale 120000 / levels, zero -60000
    v32 = signs * 1e6  # range 2e6: scale saturates at 65504, zero at -65504
    for k, v, scale, zero, norm in (
        (k16, v16, 120000.0 / levels, -60000.0, 65504.0),
        (k32, v32, 65504.0, -65504.0, 0.0),
    ):
        slots = encode_kv(k, v, name)
        dk, dv = decode_kv(slots, name, d)
        assert torch.isfinite(dk).all() and torch.isfinite(dv).all()
        for i in range(3):
            f = slot_fields(slots[i, 0], name, d)
            if get_preset(name).key_is_fp8:
                assert f["key"] == [0x7E if s > 0 else 0xFE for s in signs[i, 0].tolist()]
            else:
                assert f["norm"] == fp16_bytes(norm)
            assert f["scale"] == fp16_bytes(scale)
            assert f["zero"] == fp16_bytes(zero)
        if not get_preset(name).key_is_fp8:
            torch.testing.assert_close(torch.linalg.vector_norm(dk[:, 0], dim=-1), torch.full((3,), norm))
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
    tq_core.store(rule_keys(k, name), rule_values(v), sanitized, case.slot_mapping, name)
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
