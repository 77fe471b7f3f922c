"""The experimental register table for 3-bit codebook keys (``key_lut``): the table and the
permute constants against a model of PTX ``prmt`` on the host, the selectors against the
bit stream, and attention with and without the table against tq_core (on the CPU the
interpreter runs the table's Triton emulation; on an NVIDIA GPU the PTX itself)."""

from __future__ import annotations

import os
import re

import pytest
import torch
from tqt_helpers import assert_close, make_batch, run_triton

import tq_core
from tq_triton.attention.plan import key_lut_mode
from tq_triton.device import DeviceFacts
from tq_triton.device_tensors import codebook
from tq_triton.key_lut import _LUT_PTX, group_selectors, lut_words
from tq_triton.tuning import AttentionConfig

LUT_PRESETS = ["turboquant_k3v4_nc", "turboquant_3bit_nc"]


def prmt(a: int, b: int, sel: int) -> int:
    """PTX ``prmt.b32 d, a, b, sel`` (default mode, selector nibbles 0..7): byte i of d is
    byte ``sel``'s nibble i of the 8 bytes (a = bytes 0-3, b = bytes 4-7)."""
    pool = (a & 0xFFFFFFFF) | ((b & 0xFFFFFFFF) << 32)
    return sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


@pytest.mark.parametrize("preset", LUT_PRESETS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_permutes_of_the_table_give_every_centroid(preset, head_dim):
    # the PTX's four permutes (the selectors, then its two interleaving constants) over
    # every 4-code group whose codes are one value repeated, and two of four different codes
    inter_a, inter_b = (int(re.search(rf"prmt\.b32 {r}, l, h, (0x[0-9a-fA-F]+);", _LUT_PTX.value)[1], 16) for r in "ab")
    cent = codebook(tq_core.get_preset(preset), head_dim, torch.device("cpu"))[2]
    bits = (cent.view(torch.int16).to(torch.int64) & 0xFFFF).tolist()
    la, lb, ha, hb = (w & 0xFFFFFFFF for w in lut_words(cent).tolist())
    groups = [[c] * 4 for c in range(8)] + [[3, 7, 0, 5], [6, 1, 4, 2]]
    for codes in groups:
        sel = sum(c << (4 * i) for i, c in enumerate(codes))
        lo, hi = prmt(la, lb, sel), prmt(ha, hb, sel)
        a, b = prmt(lo, hi, inter_a), prmt(lo, hi, inter_b)
        got = [a & 0xFFFF, a >> 16, b & 0xFFFF, b >> 16]
        assert got == [bits[c] for c in codes], f"codes {codes}"


def test_lut_words_rejects_other_tables():
    with pytest.raises(ValueError, match="8 fp16"):
        lut_words(torch.zeros(16, dtype=torch.float16))


def test_group_selectors_match_the_bit_stream(gen):
    import triton
    import triton.language as tl

    @triton.jit
    def selectors(W, Out, G: tl.constexpr):
        w0 = tl.load(W).to(tl.uint32)
        w1 = tl.load(W + 1).to(tl.uint32)
        w2 = tl.load(W + 2).to(tl.uint32)
        tl.store(Out, group_selectors(w0, w1, w2, G).to(tl.int32))

    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("needs the Triton interpreter or a GPU")
    dev = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    for _ in range(4):
        codes = torch.randint(0, 8, (32,), generator=gen).tolist()
        stream = sum(c << (3 * j) for j, c in enumerate(codes))
        words = [(stream >> (32 * i)) & 0xFFFFFFFF for i in range(3)]
        w = torch.tensor([x - (1 << 32) if x >= 1 << 31 else x for x in words], dtype=torch.int32, device=dev)
        for g in range(8):
            out = torch.zeros(1, dtype=torch.int32, device=dev)
            selectors[(1,)](w, out, g)
            want = sum(codes[4 * g + i] << (4 * i) for i in range(4))
            assert int(out) == want, f"group {g}"


def test_mode_follows_the_knob_and_only_3bit_codebook_keys():
    cpu = DeviceFacts("interpreter", False, (0, 0), 4)
    k3 = tq_core.get_preset("turboquant_k3v4_nc")
    # the default uses the table only where the byte permute is native (never the interpreter)
    assert key_lut_mode(k3, AttentionConfig(), cpu) == 0
    assert key_lut_mode(k3, AttentionConfig(key_lut=2), cpu) == 2
    assert key_lut_mode(k3, AttentionConfig(key_lut=0), cpu) == 0
    force = AttentionConfig(key_lut=2)
    assert key_lut_mode(tq_core.get_preset("turboquant_k8v4"), force, cpu) == 0
    assert key_lut_mode(tq_core.get_preset("turboquant_4bit_nc"), force, cpu) == 0
    assert key_lut_mode(tq_core.get_preset("turboquant_3bit_nc"), force, cpu) == 2
    nvidia = DeviceFacts("NVIDIA H200", True, (9, 0), 132)
    assert key_lut_mode(k3, AttentionConfig(), nvidia) == 1 == key_lut_mode(k3, force, nvidia)


@pytest.mark.parametrize("key_lut", ["0", "2"])
@pytest.mark.parametrize("preset", LUT_PRESETS)
@pytest.mark.parametrize(("head_dim", "group"), [(64, 1), (128, 4), (256, 8)])
def test_attention_with_and_without_the_register_table(preset, head_dim, group, key_lut, gen, device, monkeypatch):
    # "2": the table (PTX on an NVIDIA GPU, emulated in the interpreter); "0": gathered
    monkeypatch.setenv("TQ_KEY_LUT", key_lut)
    shape = {"head_dim": head_dim, "num_kv_heads": 2, "group": group}
    b = make_batch(gen, preset, [1, 17, 70, 129], [1, 1, 8, 5], device=device, **shape)
    for splits in (1, 4):
        assert_close(*run_triton(b, splits=splits))
