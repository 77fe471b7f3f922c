"""``KernelFields``: the offsets kernels address the cache with, against ``BlockLayout`` and
against bytes read from a stored cache at the addresses the documented rule gives."""

from __future__ import annotations

import pytest
import torch
from tqc_helpers import HEAD_DIMS, PRESET_BITS, PRESET_NAMES, randn

import tq_core
from tq_core import KernelFields, block_fields, encode_kv, get_preset
from tq_core.contract import check_attention_args, check_store_args
from tq_core.testing import paged_batch


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("bs", [8, 16, 128])
@pytest.mark.parametrize("heads", [1, 3])
def test_fields_are_the_block_layout_offsets(name, d, bs, heads):
    p = get_preset(name)
    lay = p.block_layout(d, bs, heads)
    f = p.kernel_fields(lay)
    kb, vb, has_norm = PRESET_BITS[name]
    assert isinstance(f, KernelFields)
    assert (f.head_dim, f.block_size, f.num_kv_heads) == (d, bs, heads)
    assert 2**f.log2_head_dim == d
    assert (f.key_bits, f.value_bits, f.key_fp8, f.norm_correction) == (kb, vb, not has_norm, has_norm)
    assert (f.head_stride, f.block_bytes) == (lay.head_stride, lay.block_bytes)
    assert (f.key_offset, f.key_width) == (lay.key_offset, lay.key_code_bytes)
    assert (f.value_offset, f.value_width) == (lay.value_offset, lay.value_code_bytes)
    assert (f.scale_offset, f.zero_offset) == (lay.scale_offset, lay.zero_offset)
    assert f.has_norm == has_norm
    assert f.norm_offset == (lay.norm_offset if has_norm else -1)
    # widths from the bit counts, not from the layout: d codes of `bits` bits each
    assert f.key_width == d * kb // 8 and f.value_width == d * vb // 8


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_constexprs_spell_the_fields(name):
    p = get_preset(name)
    f = p.kernel_fields(p.block_layout(128, 16, 2))
    kb, vb, has_norm = PRESET_BITS[name]
    assert f.constexprs() == {
        "D": 128,
        "LOG2_D": 7,
        "BLOCK_SIZE": 16,
        "HEAD_STRIDE": f.head_stride,
        "KEY_OFF": f.key_offset,
        "KEY_BYTES": 128 * kb // 8,
        "NORM_OFF": f.norm_offset if has_norm else 0,
        "VAL_OFF": f.value_offset,
        "VAL_BYTES": 128 * vb // 8,
        "SCALE_OFF": f.scale_offset,
        "ZERO_OFF": f.zero_offset,
        "KEY_FP8": not has_norm,
        "KBITS": kb,
        "VBITS": vb,
    }


def test_fields_come_with_the_checked_arguments(gen):
    name, d, bs, heads = "turboquant_k3v4_nc", 64, 16, 2
    p = get_preset(name)
    b = paged_batch(gen, name, [20, 3], [2, 1], head_dim=d, num_kv_heads=heads, block_size=bs)
    fields = p.kernel_fields(p.block_layout(d, bs, heads))
    assert check_store_args(b.key, b.value, b.kv_cache, b.slot_mapping, name).fields == fields
    assert check_attention_args(*b.args()).fields == fields


def _slot_fields(name: str, d: int) -> dict[str, tuple[int, int]]:
    """(offset, width) of each field inside vLLM's per-token slot, from the slot layout."""
    s = get_preset(name).layout(d)
    out = {"key": (s.key_offset, s.key_code_bytes), "value": (s.value_offset, s.value_code_bytes)}
    out |= {"scale": (s.scale_offset, 2), "zero": (s.zero_offset, 2)}
    if s.norm_offset is not None:
        out["norm"] = (s.norm_offset, 2)
    return out


def _rule_fields(f: KernelFields) -> dict[str, tuple[int, int]]:
    out = {"key": (f.key_offset, f.key_width), "value": (f.value_offset, f.value_width)}
    out |= {"scale": (f.scale_offset, 2), "zero": (f.zero_offset, 2)}
    if f.has_norm:
        out["norm"] = (f.norm_offset, 2)
    return out


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize(("d", "bs", "heads"), [(64, 8, 3), (128, 16, 2)])
def test_addressing_rule_reads_what_store_wrote(gen, name, d, bs, heads):
    """Entry t of a field of head h in block b lies at b*block_stride + h*head_stride + off + t*width.

    The cache's blocks sit 40 bytes apart inside a larger buffer, so block_stride is the
    tensor's stride(0), not the block size. Each field's bytes read at the rule's address
    equal that field's bytes in the token's vLLM slot (encode_kv) and in block_fields' view.
    """
    p = get_preset(name)
    slot = p.layout(d).slot_size_aligned
    lay = p.block_layout(d, bs, heads)
    f = p.kernel_fields(lay)
    nb, gap = 3, 40
    stride = lay.block_bytes + gap
    buf = torch.randint(0, 256, (nb * stride,), generator=gen, dtype=torch.uint8)
    cache = torch.as_strided(buf, (nb, bs, heads, slot), (stride, heads * slot, slot, 1))
    assert cache.stride(0) == stride
    n = nb * bs - 5
    slots = torch.randperm(nb * bs, generator=gen)[:n]
    k, v = randn(gen, n, heads, d, scale=3.0), randn(gen, n, heads, d)
    before = buf.clone()
    tq_core.store(k, v, cache, slots, name)
    expected_slots = encode_kv(k, v, name)  # [n, heads, slot] in vLLM's per-token format
    views = block_fields(cache, lay)
    slot_fields = _slot_fields(name, d)
    raw = buf.tolist()
    for field, (off, width) in _rule_fields(f).items():
        view = getattr(views, field)
        s_off, s_width = slot_fields[field]
        assert s_width == width, field
        for i, sl in enumerate(slots.tolist()):
            b, t = divmod(sl, bs)
            for h in range(heads):
                addr = b * stride + h * f.head_stride + off + t * width
                got = raw[addr : addr + width]
                assert got == expected_slots[i, h, s_off : s_off + width].tolist(), (field, b, h, t)
                assert got == view[b, h, t].tolist(), (field, b, h, t)
    gaps = buf.view(nb, stride)[:, lay.block_bytes :]
    assert torch.equal(gaps, before.view(nb, stride)[:, lay.block_bytes :]), "store wrote between blocks"
