"""tq's paged cache: store, the block arrangement, vLLM interchange, strided views."""

from __future__ import annotations

import math

import pytest
import torch
from tqc_helpers import PRESET_NAMES, field_mask, randn, random_bytes

import tq_core
from tq_core import encode_kv, from_vllm_cache, get_preset, store, to_vllm_cache
from tq_core.testing import block_tables


def _cache(name: str, num_blocks: int, bs: int, heads: int, d: int) -> torch.Tensor:
    return torch.zeros(num_blocks, bs, heads, get_preset(name).layout(d).slot_size_aligned, dtype=torch.uint8)


def _random_tq_cache(gen, name, num_blocks, bs, heads, d) -> torch.Tensor:
    """Random bytes on every field byte of tq's arrangement, zero on padding."""
    s = get_preset(name).layout(d).slot_size_aligned
    return random_bytes(gen, num_blocks, bs, heads, s) & field_mask(name, d, bs, heads, num_blocks)


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("bs", [8, 16, 32])
def test_store_equals_encode_kv_through_to_vllm_cache(gen, name, bs):
    d, heads, nb = 128, 3, 5
    n = 29  # odd, fewer than the cache's slots
    slots = torch.randperm(nb * bs, generator=gen)[:n]
    k, v = randn(gen, n, heads, d) * 2, randn(gen, n, heads, d)
    cache = _cache(name, nb, bs, heads, d)
    store(k, v, cache, slots, name)
    vllm = to_vllm_cache(cache, name)
    assert vllm.shape == cache.shape and vllm.dtype == torch.uint8
    assert torch.equal(vllm.flatten(0, 1)[slots], encode_kv(k, v, name))
    # every other slot is still all zero
    untouched = torch.ones(nb * bs, dtype=torch.bool)
    untouched[slots] = False
    assert int(vllm.flatten(0, 1)[untouched].count_nonzero()) == 0


def test_block_arrangement_bytes_by_hand(gen):
    """k3v4_nc, d=128, block_size 16: per head [keys 48 x 16 @0][norms 2 x 16 @768][values 64 x 16 @800]
    [scales 2 x 16 @1824][zeros 2 x 16 @1856]; head stride 1888 bytes (docs/format.md)."""
    name, d, bs, heads, nb = "turboquant_k3v4_nc", 128, 16, 2, 3
    n = 11
    slots = torch.randperm(nb * bs, generator=gen)[:n]
    k, v = randn(gen, n, heads, d), randn(gen, n, heads, d)
    cache = _cache(name, nb, bs, heads, d)
    store(k, v, cache, slots, name)
    enc = encode_kv(k, v, name)  # vLLM slot: key 0..47, norm 48..49, value 50..113, scale 114..115, zero 116..117
    fields = [(0, 0, 48), (768, 48, 2), (800, 50, 64), (1824, 114, 2), (1856, 116, 2)]
    for i in range(n):
        blk, off = divmod(int(slots[i]), bs)
        raw = cache[blk].reshape(-1)  # the block's bytes in memory order
        for h in range(heads):
            base = h * 1888
            for tq_off, slot_off, width in fields:
                start = base + tq_off + off * width
                assert torch.equal(raw[start : start + width], enc[i, h, slot_off : slot_off + width])


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("d", [64, 256])
def test_from_to_round_trip_on_random_tq_bytes(gen, name, d):
    bs, heads, nb = 16, 3, 4
    x = _random_tq_cache(gen, name, nb, bs, heads, d)
    assert torch.equal(from_vllm_cache(to_vllm_cache(x, name), name), x)


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("bs", [8, 16, 128])
def test_to_from_round_trip_on_random_vllm_bytes(gen, name, bs):
    d, heads, nb = 128, 2, 3
    lay = get_preset(name).layout(d)
    y = random_bytes(gen, nb, bs, heads, lay.slot_size_aligned)
    y[..., lay.slot_size :] = 0  # vLLM's pad byte (if any) carries nothing
    tq = from_vllm_cache(y, name)
    assert tq.shape == y.shape
    assert int((tq & ~field_mask(name, d, bs, heads, nb)).count_nonzero()) == 0  # padding zero
    assert torch.equal(to_vllm_cache(tq, name), y)


def test_to_vllm_cache_infers_head_dim_from_slot_size(gen):
    name = "turboquant_4bit_nc"
    for d in (64, 128, 256, 512):
        x = _random_tq_cache(gen, name, 2, 8, 1, d)
        assert torch.equal(from_vllm_cache(to_vllm_cache(x, name), name), x)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_negative_slots_are_skipped(gen, name):
    d, heads, bs, nb = 64, 2, 16, 4
    before = _random_tq_cache(gen, name, nb, bs, heads, d)
    cache = before.clone()
    n = 13
    slots = torch.randperm(nb * bs, generator=gen)[:n]
    pad = torch.rand(n, generator=gen) < 0.4
    pad[0] = True
    slots[pad] = -1
    slots[torch.nonzero(pad)[-1]] = -7  # any negative value is padding
    k, v = randn(gen, n, heads, d), randn(gen, n, heads, d)
    store(k, v, cache, slots, name)
    after, prior = to_vllm_cache(cache, name).flatten(0, 1), to_vllm_cache(before, name).flatten(0, 1)
    written = slots[~pad]
    assert torch.equal(after[written], encode_kv(k[~pad], v[~pad], name))
    keep = torch.ones(nb * bs, dtype=torch.bool)
    keep[written] = False
    assert torch.equal(after[keep], prior[keep])
    # all padding: nothing changes
    cache2 = before.clone()
    store(k, v, cache2, torch.full((n,), -1), name)
    assert torch.equal(cache2, before)


def test_store_int32_slot_mapping_and_half_inputs(gen):
    name, d, bs = "turboquant_k8v4", 128, 16
    k, v = randn(gen, 5, 1, d, dtype=torch.bfloat16), randn(gen, 5, 1, d, dtype=torch.bfloat16)
    a, b = _cache(name, 2, bs, 1, d), _cache(name, 2, bs, 1, d)
    slots = torch.tensor([3, 17, 0, 31, 9])
    store(k, v, a, slots.to(torch.int32), name)
    store(k.float(), v.float(), b, slots, name)
    assert torch.equal(a, b)


def _attn(cache, name, gen_q, seq_lens, q_lens, table, d, hq):
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = randn(gen_q, sum(q_lens), hq, d)
    return tq_core.attention(q, cache, table, torch.tensor(seq_lens, dtype=torch.int32), qsl, name, 1 / math.sqrt(d))


@pytest.mark.parametrize("name", ["turboquant_k8v4", "turboquant_k3v4_nc"])
def test_transposed_and_block_strided_views(gen, seed, name):
    """Physical [NB, H, B, S] seen as [NB, B, H, S] (vLLM's newer head-major cache), and blocks
    at a stride inside a larger buffer: same block bytes, same conversion, same attention."""
    d, heads, bs = 128, 4, 16
    seq_lens, q_lens = [37, 16, 5], [3, 1, 5]
    nb, table, slots = block_tables(gen, seq_lens, bs)
    s = get_preset(name).layout(d).slot_size_aligned
    k, v = randn(gen, len(slots), heads, d), randn(gen, len(slots), heads, d)

    dense = torch.zeros(nb, bs, heads, s, dtype=torch.uint8)
    phys = torch.zeros(nb, heads, bs, s, dtype=torch.uint8)
    head_major = phys.transpose(1, 2)
    big = torch.full((nb, 2, bs * heads * s), 0xEE, dtype=torch.uint8)
    big[:, 0] = 0
    strided = big[:, 0].view(nb, bs, heads, s)  # block stride 2 * block bytes
    gap_bytes = torch.full((nb, 48 + bs * heads * s), 0xEE, dtype=torch.uint8)
    gap_bytes[:, 48:] = 0
    offset_view = gap_bytes[:, 48:].view(nb, bs, heads, s)  # blocks start 48 bytes into each row
    assert not head_major.is_contiguous() and not strided.is_contiguous()

    outs = []
    for cache in (dense, head_major, strided, offset_view):
        store(k, v, cache, slots, name)
        # the block's bytes in memory order are the same whatever the logical view
        raw = torch.as_strided(cache, (nb, bs * heads * s), (cache.stride(0), 1))
        assert torch.equal(raw, dense.view(nb, -1))
        assert torch.equal(to_vllm_cache(cache, name), to_vllm_cache(dense, name))
        outs.append(_attn(cache, name, torch.Generator().manual_seed(seed), seq_lens, q_lens, table, d, 2 * heads))
    for o in outs[1:]:
        assert torch.equal(o, outs[0])
    # bytes between the strided blocks are never written
    assert bool((big[:, 1] == 0xEE).all()) and bool((gap_bytes[:, :48] == 0xEE).all())


def test_first_tokens_of_larger_blocks_view(gen):
    """c[:, :8] of a [NB, 16, H, S] cache is a valid 8-token-block cache at a 16-token block stride."""
    name, d, heads = "turboquant_3bit_nc", 64, 2
    outer = _cache(name, 4, 16, heads, d)
    view = outer[:, :8]
    dense = _cache(name, 4, 8, heads, d)
    slots = torch.randperm(32, generator=gen)[:20]
    k, v = randn(gen, 20, heads, d), randn(gen, 20, heads, d)
    store(k, v, view, slots, name)
    store(k, v, dense, slots, name)
    assert torch.equal(view, dense)
    assert int(outer[:, 8:].count_nonzero()) == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda c: c[:, :, :2],  # a subset of the heads: block bytes not dense
        lambda c: c.transpose(2, 3).contiguous().transpose(2, 3),  # slot bytes not innermost
        lambda c: c.transpose(0, 1).contiguous().transpose(0, 1),  # token-major across blocks
    ],
    ids=["head-slice", "slot-not-innermost", "blocks-interleaved"],
)
def test_non_contiguous_blocks_raise_layout_error(gen, make):
    name, d, bs, heads = "turboquant_4bit_nc", 64, 16, 4
    cache = make(_cache(name, 3, bs, heads, d))
    nh = cache.shape[2]
    k, v = randn(gen, 2, nh, d), randn(gen, 2, nh, d)
    with pytest.raises(tq_core.LayoutError, match="kv_cache"):
        store(k, v, cache, torch.tensor([0, 1]), name)
    with pytest.raises(tq_core.LayoutError, match="kv_cache"):
        to_vllm_cache(cache, name)
    with pytest.raises(tq_core.LayoutError, match="kv_cache"):
        from_vllm_cache(cache, name)
    with pytest.raises(tq_core.LayoutError, match="kv_cache"):
        tq_core.attention(
            randn(gen, 1, nh, d),
            cache,
            torch.zeros(1, 1, dtype=torch.int32),
            torch.tensor([1], dtype=torch.int32),
            torch.tensor([0, 1], dtype=torch.int32),
            name,
            0.125,
        )


def test_block_fields_views_share_memory():
    name, d, bs, heads = "turboquant_k3v4_nc", 128, 16, 2
    cache = _cache(name, 2, bs, heads, d)
    lay = get_preset(name).block_layout(d, bs, heads)
    f = tq_core.block_fields(cache, lay)
    assert f.key.shape == (2, heads, bs, 48) and f.norm.shape == (2, heads, bs, 2)
    assert f.value.shape == (2, heads, bs, 64) and f.scale.shape == f.zero.shape == (2, heads, bs, 2)
    f.zero[1, 1, 15] = 0xAB  # last token of head 1 of block 1: its zero is the last 2 bytes of the block
    raw = cache[1].reshape(-1)
    assert raw[-2:].tolist() == [0xAB, 0xAB] and int(raw[:-2].count_nonzero()) == 0
