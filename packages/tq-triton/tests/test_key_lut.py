"""The register tables for codebook codes (``key_lut``: 3- and 4-bit keys, 3- and 4-bit
calibrated values): the tables and the Gluon kernel's permute constants
(``nvidia.lut_ptx``) against a model of PTX ``prmt`` on the host, the selectors against the
bit stream, the portable kernel's lookups (plain Triton operations, on every device) against
the codebook gathered from memory, the plan's choice of them, and attention with them
against tq_core."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from tqt_helpers import assert_close, make_batch, run_triton

import tq_core
import tq_triton
from tq_triton.attention import plan
from tq_triton.codebook_decode import codebook_tile
from tq_triton.device import DeviceFacts
from tq_triton.device_tensors import cached_value_codebook, codebook
from tq_triton.key_lut import group_selectors, lut_words, magnitude_selectors_fn
from tq_triton.nvidia.lut_ptx import LUT16_PAIRS_PTX, LUT_PAIRS_PTX, SIGN_SELECTORS
from tq_triton.tuning import AttentionConfig

LUT_PRESETS = ["turboquant_k3v4_nc", "turboquant_3bit_nc"]
# 4-bit keys, and the calibrated formats' 3- and 4-bit values
LUT16_PRESETS = ["turboquant_4bit_nc", "tq_k4v3", "tq_k4v4"]


def prmt(a: int, b: int, sel: int) -> int:
    """PTX ``prmt.b32 d, a, b, sel`` (default mode): byte i of d is byte ``sel``'s nibble i
    (bits 0-2) of the 8 bytes (a = bytes 0-3, b = bytes 4-7), or where the nibble's bit 3 is
    set, that byte's top bit copied into all eight bits."""
    pool = (a & 0xFFFFFFFF) | ((b & 0xFFFFFFFF) << 32)
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 15
        byte = (pool >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _interleave_constants(ptx: str) -> tuple[int, int]:
    return tuple(int(re.search(rf"prmt\.b32 {r}, l, h, (0x[0-9a-fA-F]+);", ptx)[1], 16) for r in "ab")


@pytest.mark.parametrize("preset", LUT_PRESETS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_permutes_of_the_table_give_every_centroid(preset, head_dim):
    # the PTX's four permutes (the selectors, then its two interleaving constants) over
    # every 4-code group whose codes are one value repeated, and two of four different codes
    inter_a, inter_b = _interleave_constants(LUT_PAIRS_PTX.value)
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


def _codebook16(preset: str, head_dim: int, values: bool) -> torch.Tensor:
    p = tq_core.get_preset(preset)
    if values:
        return tq_core.value_codebook(p, head_dim, "cpu")[0].to(torch.float16)
    return codebook(p, head_dim, torch.device("cpu"))[2]


@pytest.mark.parametrize(("preset", "values"), [("turboquant_4bit_nc", False), ("tq_k4v4", True)])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_signed_permutes_of_the_16_entry_table_give_every_centroid(preset, values, head_dim):
    # the 4-bit PTX on the host: magnitude selectors (lut16_values' rule), the permutes, the
    # interleave, then the sign permutes of SIGN_SELECTORS and the mask the PTX applies
    ptx = LUT16_PAIRS_PTX.value
    inter_a, inter_b = _interleave_constants(ptx)
    assert [int(x, 16) for x in re.findall(r"prmt\.b32 m, \$4, r4, (0x[0-9a-f]+);", ptx)] == list(SIGN_SELECTORS)
    assert ptx.count("and.b32 m, m, 0x80008000;") == 2 and "shl.b32 r4, $4, 4;" in ptx
    cent = _codebook16(preset, head_dim, values)
    bits = (cent.view(torch.int16).to(torch.int64) & 0xFFFF).tolist()
    la, lb, ha, hb = (w & 0xFFFFFFFF for w in lut_words(cent).tolist())
    groups = [[c] * 4 for c in range(16)] + [[3, 15, 0, 9], [12, 1, 8, 7], [6, 10, 14, 2]]
    for codes in groups:
        raw = sum(c << (4 * i) for i, c in enumerate(codes))
        sel = sum((c & 7 if c & 8 else c ^ 7) << (4 * i) for i, c in enumerate(codes))
        lo, hi = prmt(la, lb, sel), prmt(ha, hb, sel)
        pair = [prmt(lo, hi, inter_a), prmt(lo, hi, inter_b)]
        for k, sign_sel in enumerate(SIGN_SELECTORS):
            m = prmt(raw, (raw << 4) & 0xFFFFFFFF, sign_sel)
            pair[k] ^= ~m & 0x80008000
        got = [pair[0] & 0xFFFF, pair[0] >> 16, pair[1] & 0xFFFF, pair[1] >> 16]
        assert got == [bits[c] for c in codes], f"codes {codes}"


def _f16x2(x: int) -> np.ndarray:
    return np.array([x & 0xFFFF, x >> 16], dtype=np.uint16).view(np.float16)


def _b32(h: np.ndarray) -> int:
    lo, hi = (int(v) for v in h.astype(np.float16).view(np.uint16))
    return lo | (hi << 16)


def run_ptx(ptx: str, operands: dict[int, int]) -> dict[int, int | float]:
    """The inline PTX of a lookup run on the host, line by line: the instructions that
    ``lut_ptx``'s lookups use (``prmt`` as :func:`prmt` models it, 32-bit logic, fp16x2
    products, fp16 to float32), on ``operands`` (``$n`` -> its 32-bit value). Returns the
    registers ``$n`` it writes."""
    regs: dict[str, int | float] = {f"${n}": v & 0xFFFFFFFF for n, v in operands.items()}

    def val(x: str) -> int | float:
        return regs[x] if x in regs else int(x, 0)

    for line in ptx.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}." or line.startswith(".reg"):
            continue
        op, args = line.split(None, 1)
        split = re.fullmatch(r"\{(\S+), (\S+)\}, (\S+)", args)
        if op == "mov.b32" and split:  # a 32-bit register into two 16-bit halves
            lo, hi, src = split.groups()
            regs[lo], regs[hi] = val(src) & 0xFFFF, val(src) >> 16
            continue
        d, *src = [a.strip() for a in args.split(",")]
        x = [val(a) for a in src]
        if op == "prmt.b32":
            regs[d] = prmt(*x)
        elif op == "shl.b32":
            regs[d] = (x[0] << x[1]) & 0xFFFFFFFF
        elif op == "not.b32":
            regs[d] = ~x[0] & 0xFFFFFFFF
        elif op in ("and.b32", "xor.b32"):
            regs[d] = x[0] & x[1] if op == "and.b32" else x[0] ^ x[1]
        elif op == "mov.b32":
            regs[d] = x[0]
        elif op == "mul.rn.f16x2":
            regs[d] = _b32(_f16x2(x[0]) * _f16x2(x[1]))
        elif op == "fma.rn.f16x2":
            # fp16 rounding once, of the float32 result (exact for fp16 operands but for
            # double rounding, far below the test's tolerance)
            f = _f16x2(x[0]).astype(np.float32) * _f16x2(x[1]).astype(np.float32) + _f16x2(x[2]).astype(np.float32)
            regs[d] = _b32(f)
        elif op == "cvt.f32.f16":
            regs[d] = float(np.array([x[0]], dtype=np.uint16).view(np.float16)[0])
        elif op in ("add.f32", "add.rn.f32"):
            regs[d] = float(np.float32(x[0]) + np.float32(x[1]))
        elif op == "mul.rn.f32":
            regs[d] = float(np.float32(x[0]) * np.float32(x[1]))
        elif op == "fma.rn.f32":
            # one rounding: the product of two float32 numbers is exact in float64, the sum
            # then rounds once there and once to float32 (exact here: fp16 squares)
            regs[d] = float(np.float32(np.float64(x[0]) * np.float64(x[1]) + np.float64(x[2])))
        else:
            raise AssertionError(f"the host model has no {op}")
    return {int(k[1:]): v for k, v in regs.items() if k[0] == "$" and int(k[1:]) not in operands}


def test_the_ptx_model_runs_the_8_entry_pairs_lookup():
    # the host model against the 3-bit lookup's pairs variant, whose permutes the test above checks
    cent = codebook(tq_core.get_preset("turboquant_k3v4_nc"), 128, torch.device("cpu"))[2]
    bits = (cent.view(torch.int16).to(torch.int64) & 0xFFFF).tolist()
    la, lb, ha, hb = lut_words(cent).tolist()
    out = run_ptx(LUT_PAIRS_PTX.value, {3: 0x5273, 4: la, 5: lb, 6: ha, 7: hb})
    assert [out[0] & 0xFFFF, out[0] >> 16, out[1] & 0xFFFF, out[1] >> 16] == [bits[c] for c in (3, 7, 2, 5)]
    # the squares' sum as key_lut's lookup makes it, bit for bit
    f = [np.float32(cent[c]) for c in (3, 7, 2, 5)]
    assert out[2] == float((f[0] * f[0] + f[2] * f[2]) + (f[1] * f[1] + f[3] * f[3]))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_16_entry_pairs_lookup_gives_every_centroid_in_position_order(head_dim):
    # LUT16_PAIRS_PTX as the Gluon kernel's _lut16_keys runs it: per word of 8 codes (low
    # nibble first), magnitude_selectors, then one lookup of the word's low half (selectors
    # and codes unmasked: the PTX reads bits 0-15) and one of its high half (shifted by 16);
    # the fp16 pairs (a: codes 0, 1; b: 2, 3) flatten to the word's positions in order
    cent = codebook(tq_core.get_preset("turboquant_4bit_nc"), head_dim, torch.device("cpu"))[2]
    bits = (cent.view(torch.int16).to(torch.int64) & 0xFFFF).tolist()
    la, lb, ha, hb = lut_words(cent).tolist()
    words = [[c] * 8 for c in range(16)] + [list(range(8)), list(range(8, 16)), [3, 15, 0, 9, 12, 1, 8, 7]]
    words += [[6, 10, 14, 2, 5, 11, 13, 4], [15, 0, 14, 1, 13, 2, 12, 3]]
    for codes in words:
        w = sum(c << (4 * j) for j, c in enumerate(codes))
        sel = magnitude_selectors_fn(w)
        got, sq = [], []
        for half in (0, 16):
            out = run_ptx(LUT16_PAIRS_PTX.value, {3: sel >> half, 4: w >> half, 5: la, 6: lb, 7: ha, 8: hb})
            got += [out[0] & 0xFFFF, out[0] >> 16, out[1] & 0xFFFF, out[1] >> 16]
            sq.append(out[2])
        assert got == [bits[c] for c in codes], f"codes {codes}"
        for h in (0, 1):
            # bit for bit key_lut's float32 sum in the portable kernel: (c0^2 + c2^2) + (c1^2 + c3^2)
            f = [np.float32(cent[c]) for c in codes[4 * h : 4 * h + 4]]
            want = (f[0] * f[0] + f[2] * f[2]) + (f[1] * f[1] + f[3] * f[3])
            assert sq[h] == float(want), f"codes {codes}"


def test_lut_words_rejects_other_tables():
    with pytest.raises(ValueError, match="8 or 16 fp16"):
        lut_words(torch.zeros(32, dtype=torch.float16))
    with pytest.raises(ValueError, match="8 or 16 fp16"):
        lut_words(torch.zeros(8, dtype=torch.float32))
    lopsided = _codebook16("turboquant_4bit_nc", 128, False).clone()
    lopsided[2] = lopsided[2] * 0.5
    with pytest.raises(ValueError, match="symmetric"):
        lut_words(lopsided)


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


INTERPRETER = DeviceFacts("interpreter", False, (0, 0), 4)
XPU = DeviceFacts("Intel(R) Arc(TM) B580 Graphics", False, (0, 0), 20, type="xpu")
H200 = DeviceFacts("NVIDIA H200", True, (9, 0), 132)
# the presets whose keys (values) the portable kernel looks up in a register table (tq_k4v4's
# symmetric values are decoded from their codes' bits)
# 3-bit keys and tq_k4v3's 3-bit values are decoded by key_poly's polynomial instead
# (test_key_poly.py)
TABLE_KEYS = {"turboquant_4bit_nc", "tq_k4v3", "tq_k4v4"}
POLY_KEYS = {"turboquant_k3v4_nc", "turboquant_3bit_nc"}
POLY_VALUES = {"tq_k4v3"}


@pytest.mark.parametrize("facts", [INTERPRETER, XPU, H200], ids=["interpreter", "xpu", "nvidia"])
def test_the_portable_kernel_looks_3_and_4_bit_codes_up_in_the_table_on_every_device(facts):
    # KEY_LUT / KEY_POLY / VALUE_POLY follow the codes' widths alone (no knob, no
    # device fact): 4-bit codebook keys in the table, 3-bit keys and calibrated values by the
    # polynomial; not fp8 keys, 6-bit keys, symmetric or 5-bit values
    for name in (*tq_core.PRESETS, *tq_core.CALIBRATED_PRESETS):
        p = tq_core.get_preset(name)
        fields = p.kernel_fields(p.block_layout(128, 16, 2)).constexprs()
        lp = plan.plan_attention(facts, p, fields, 8, 2, 3, 1, 16, config=AttentionConfig())
        assert lp.constexprs["KEY_LUT"] is (name in TABLE_KEYS), name
        # the portable kernel has no value table: calibrated values by the polynomial or gathered
        assert "VALUE_LUT" not in lp.constexprs, name
        assert lp.constexprs["KEY_POLY"] is (name in POLY_KEYS), name
        assert lp.constexprs["VALUE_POLY"] is (name in POLY_VALUES), name
        assert lp.key_table == (name in TABLE_KEYS) and plan.served_by(lp) == "portable", name
        # the compile-time arguments the Xe2 compile check compiles
        cx = plan.kernel_constexprs(p, fields, AttentionConfig(), 4, 8, 1, 4)
        assert (cx["KEY_LUT"], cx["VALUE_POLY"]) == (name in TABLE_KEYS, name in POLY_VALUES), name
    # gluon 2 off NVIDIA GPUs: the portable kernel, with the polynomial
    p = tq_core.get_preset("turboquant_k3v4_nc")
    fields = p.kernel_fields(p.block_layout(128, 16, 2)).constexprs()
    lp = plan.plan_attention(facts, p, fields, 8, 2, 3, 1, 16, config=AttentionConfig(gluon=2))
    if not facts.nvidia:
        assert plan.served_by(lp) == "portable" and lp.constexprs["KEY_POLY"] is True


def test_the_portable_kernel_has_no_inline_assembly():
    # the portable kernel's modules (everything of tq_triton outside nvidia/) hold no inline
    # assembly: the same source compiles for every backend
    root = Path(tq_triton.__file__).parent
    for path in root.rglob("*.py"):
        if "nvidia" in path.relative_to(root).parts:
            continue
        text = path.read_text()
        assert "inline_asm" not in text and "asm_elementwise" not in text, path


@triton.jit
def _decode_tile(
    W, Table, Out, Sq, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr, TABLE: tl.constexpr, WIDE: tl.constexpr
):
    """``codebook_tile`` of a tile of packed codes ``W`` (int32 ``[T, D * BITS // 32]``), loaded
    as ``bitpack.load_words`` loads them: for 3 bits the three words of each 32-code chunk,
    ``[T, D // 32]`` each; for 4 bits the words ``[T, D // 8]``."""
    t = tl.arange(0, T)[:, None]
    if BITS == 4:
        ws = (tl.load(W + t * (D // 8) + tl.arange(0, D // 8)[None, :]).to(tl.uint32, bitcast=True),)
    else:
        row = W + t * (3 * D // 32) + tl.arange(0, D // 32)[None, :] * 3
        ws = (
            tl.load(row).to(tl.uint32, bitcast=True),
            tl.load(row + 1).to(tl.uint32, bitcast=True),
            tl.load(row + 2).to(tl.uint32, bitcast=True),
        )
    k16, sq = codebook_tile(ws, Table, BITS, T, D, TABLE, WIDE)
    tl.store(Out + t * D + tl.arange(0, D)[None, :], k16)
    tl.store(Sq + tl.arange(0, T), sq)


@pytest.mark.parametrize(
    ("preset", "values"),
    [("turboquant_k3v4_nc", False), ("turboquant_4bit_nc", False), ("tq_k4v3", True), ("tq_k4v4", True)],
)
def test_the_table_lookup_gives_the_gathered_centroids(preset, values, gen):
    # codebook_tile with the register table (plain Triton operations) against the same codes
    # gathered from the fp16 codebook: every centroid bit for bit, the squared norms close
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("needs the Triton interpreter or a GPU")
    dev = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    p = tq_core.get_preset(preset)
    T, D = 16, 64
    if values:
        cent = cached_value_codebook(p, D, torch.device("cpu"))[1]
        bits = p.value_bits
    else:
        cent = codebook(p, D, torch.device("cpu"))[2]
        bits = p.key_bits
    n = len(cent)
    # every code at least once per token, in shuffled positions
    codes = torch.stack([torch.randperm(D, generator=gen) % n for _ in range(T)])
    stream = [sum(int(c) << (bits * j) for j, c in enumerate(row)) for row in codes.tolist()]
    nw = D * bits // 32
    words = [[(v >> (32 * i)) & 0xFFFFFFFF for i in range(nw)] for v in stream]
    w = torch.tensor([[x - (1 << 32) if x >= 1 << 31 else x for x in row] for row in words], dtype=torch.int32)
    outs = {}
    # gathered; the table; for 4-bit codes the table's 64-bit form too (plan.wide_key_tables)
    for table, wide in [(False, False), (True, False)] + [(True, True)] * (bits == 4):
        out = torch.zeros(T, D, dtype=torch.float16, device=dev)
        sq = torch.zeros(T, dtype=torch.float32, device=dev)
        tab = lut_words(cent).to(dev) if table else cent.to(dev)
        _decode_tile[(1,)](w.to(dev), tab, out, sq, bits, T, D, table, wide)
        outs[table, wide] = (out.cpu(), sq.cpu())
    want = cent[codes]
    for form, (out, sq) in outs.items():
        assert torch.equal(out.view(torch.int16), want.view(torch.int16)), (preset, form)
        torch.testing.assert_close(sq, want.float().pow(2).sum(1), rtol=2e-3, atol=0)


# 3-bit keys at every head_dim; 4-bit keys (the rest), with the calibrated formats' 3-bit
# (tq_k4v3, by key_poly's polynomial) and 4-bit (tq_k4v4) values
TABLE_ROWS = [(p, d, g) for p in LUT_PRESETS for d, g in [(64, 1), (128, 4), (256, 8)]] + [
    ("turboquant_4bit_nc", 64, 2),
    ("tq_k4v3", 128, 4),
    ("tq_k4v4", 64, 1),
]


@pytest.mark.parametrize(("preset", "head_dim", "group"), TABLE_ROWS)
def test_attention_with_the_register_tables(preset, head_dim, group, gen, device):
    # the portable kernel looks these codes up in its register tables on every device
    shape = {"head_dim": head_dim, "num_kv_heads": 2, "group": group}
    b = make_batch(gen, preset, [1, 17, 70, 129], [1, 1, 8, 5], device=device, **shape)
    for splits in (1, 4):
        assert_close(*run_triton(b, splits=splits))
