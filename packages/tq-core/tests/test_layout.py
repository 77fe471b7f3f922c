"""Presets, vLLM's per-token slot layout and tq's per-block arrangement."""

from __future__ import annotations

import math

import pytest
from tqc_helpers import HEAD_DIMS, PRESET_BITS, PRESET_NAMES

import tq_core


def formula_slot_size(d: int, key_bits: int, value_bits: int, has_norm: bool) -> int:
    """vLLM's rule (docs/references.md#presets-and-bytes-per-token): key d (fp8) or ceil(d*bits/8) + 2;
    value ceil(d*vbits/8) + 4; round up to even."""
    key = d if key_bits == 8 else math.ceil(d * key_bits / 8) + 2
    value = math.ceil(d * value_bits / 8) + 2 + 2
    s = key + value
    return s + (s % 2)


def test_acceptance_k3v4_slot_is_118():
    assert tq_core.get_preset("turboquant_k3v4_nc").layout(128).slot_size_aligned == 118


def test_slot_sizes_at_128_literal():
    sizes = {n: tq_core.get_preset(n).layout(128).slot_size_aligned for n in PRESET_NAMES}
    assert sizes == {
        "turboquant_k8v4": 196,
        "turboquant_4bit_nc": 134,
        "turboquant_k3v4_nc": 118,
        "turboquant_3bit_nc": 102,
    }


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_slot_size_matches_formula(name, d):
    lay = tq_core.get_preset(name).layout(d)
    assert lay.slot_size_aligned == formula_slot_size(d, *PRESET_BITS[name])
    assert lay.slot_size_aligned % 2 == 0
    assert lay.slot_size_aligned - lay.slot_size in (0, 1)
    assert lay.head_dim == d


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_attributes(name):
    p = tq_core.get_preset(name)
    kb, vb, has_norm = PRESET_BITS[name]
    assert (p.key_bits, p.value_bits, p.key_is_fp8, p.norm_correction) == (kb, vb, not has_norm, has_norm)
    assert tq_core.get_preset(p) is p
    assert str(p) == name
    assert tq_core.PRESETS[name] is p


# (key codes, norm, value codes, scale, zero) as (offset, size); vLLM's PRESET_EXPECTED at d=128
SLOT_FIELDS_128 = {
    "turboquant_k8v4": ((0, 128), None, (128, 64), (192, 2), (194, 2)),
    "turboquant_4bit_nc": ((0, 64), (64, 2), (66, 64), (130, 2), (132, 2)),
    "turboquant_k3v4_nc": ((0, 48), (48, 2), (50, 64), (114, 2), (116, 2)),
    "turboquant_3bit_nc": ((0, 48), (48, 2), (50, 48), (98, 2), (100, 2)),
}


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_slot_field_offsets_at_128(name):
    lay = tq_core.get_preset(name).layout(128)
    key, norm, value, scale, zero = SLOT_FIELDS_128[name]
    assert (lay.key_offset, lay.key_code_bytes) == key
    assert lay.norm_offset == (None if norm is None else norm[0])
    assert (lay.value_offset, lay.value_code_bytes) == value
    assert lay.scale_offset == scale[0]
    assert lay.zero_offset == zero[0]
    assert lay.key_bytes == key[1] + (0 if norm is None else 2)
    assert lay.value_bytes == value[1] + 4


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_slot_fields_tile_the_slot(name, d):
    """Fields are back to back in vLLM's order [key codes | norm | value codes | scale | zero]."""
    lay = tq_core.get_preset(name).layout(d)
    kb, vb, has_norm = PRESET_BITS[name]
    fields = [(lay.key_offset, d * kb // 8)]
    if has_norm:
        fields.append((lay.norm_offset, 2))
    fields += [(lay.value_offset, d * vb // 8), (lay.scale_offset, 2), (lay.zero_offset, 2)]
    pos = 0
    for off, size in fields:
        assert off == pos
        pos += size
    assert pos == lay.slot_size


BLOCK_SIZES = (8, 16, 32, 64, 128)


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("heads", [1, 3])
def test_block_layout_fields_aligned_disjoint_and_fit(name, d, heads):
    p = tq_core.get_preset(name)
    slot = p.layout(d)
    for bs in BLOCK_SIZES:
        bl = p.block_layout(d, bs, heads)
        assert bl.block_size == bs and bl.num_kv_heads == heads and bl.head_dim == d
        assert bl.head_stride == bs * slot.slot_size_aligned
        assert bl.block_bytes == bs * heads * slot.slot_size_aligned  # vLLM's bytes per block
        assert bl.head_stride % 16 == 0  # so every head's fields are 16-byte aligned in the block
        fields = [("key", bl.key_offset, bs * slot.key_code_bytes)]
        if slot.norm_offset is not None:
            fields.append(("norm", bl.norm_offset, 2 * bs))
        else:
            assert bl.norm_offset is None
        fields += [
            ("value", bl.value_offset, bs * slot.value_code_bytes),
            ("scale", bl.scale_offset, 2 * bs),
            ("zero", bl.zero_offset, 2 * bs),
        ]
        end = 0
        for field, off, size in fields:  # in docs/format.md's order, each after the previous one
            assert off % 16 == 0, (bs, field, off)
            assert off >= end, (bs, field, off, end)
            end = off + size
        assert end == bl.used_bytes
        assert bl.used_bytes <= bs * slot.slot_size_aligned


def test_block_layout_example_bs16_k3v4_128():
    """The example drawn in docs/format.md."""
    bl = tq_core.get_preset("turboquant_k3v4_nc").block_layout(128, 16, 2)
    assert (bl.key_offset, bl.norm_offset, bl.value_offset, bl.scale_offset, bl.zero_offset) == (
        0,
        768,
        800,
        1824,
        1856,
    )
    assert (bl.used_bytes, bl.head_stride, bl.block_bytes) == (1888, 1888, 3776)


def test_block_layout_example_bs16_k8v4_128():
    bl = tq_core.get_preset("turboquant_k8v4").block_layout(128, 16, 1)
    assert (bl.key_offset, bl.norm_offset, bl.value_offset, bl.scale_offset, bl.zero_offset) == (
        0,
        None,
        2048,
        3072,
        3104,
    )
    assert bl.used_bytes == bl.head_stride == 3136


def test_supported_head_dims():
    assert tq_core.SUPPORTED_HEAD_DIMS == (64, 128, 256, 512)
