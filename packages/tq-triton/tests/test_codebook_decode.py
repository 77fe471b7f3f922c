"""The portable kernel's codebook decode (``codebook_decode``): the pair table of 3- and
4-bit codebooks (keys, and calibrated formats' values) and the gather, against the codebook
itself on every device; the plan's choice between them; attention with the pair tables
against tq_core; no inline assembly outside ``nvidia/``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from tqt_canary import check_calibrated_hostile_batch
from tqt_helpers import assert_close, make_batch, run_triton

import tq_core
import tq_triton
from tq_triton.attention import plan
from tq_triton.codebook_decode import codebook_tile, pair_words
from tq_triton.device import DeviceFacts
from tq_triton.device_tensors import cached_value_codebook, codebook
from tq_triton.tuning import AttentionConfig

# 3-bit keys
LUT_PRESETS = ["turboquant_k3v4_nc", "turboquant_3bit_nc"]


def test_pair_words_holds_every_pair_low_code_first():
    cent = torch.tensor([-3.0, -1.5, -0.5, -0.25, 0.25, 0.5, 1.5, 3.0], dtype=torch.float16)
    words = pair_words(cent)
    assert words.dtype == torch.int32 and words.shape == (64,)
    bits = cent.view(torch.int16).to(torch.int64) & 0xFFFF
    for a in range(8):
        for b in range(8):
            assert int(words[a + 8 * b]) & 0xFFFFFFFF == int(bits[a]) | (int(bits[b]) << 16), (a, b)
    assert pair_words(torch.arange(16, dtype=torch.float16)).shape == (256,)
    for bad in (cent.float(), cent[:4], torch.zeros(32, dtype=torch.float16)):
        with pytest.raises(ValueError, match="pair_words"):
            pair_words(bad)


INTERPRETER = DeviceFacts("interpreter", False, (0, 0), 4)
XPU = DeviceFacts("Intel(R) Arc(TM) B580 Graphics", False, (0, 0), 20, type="xpu")
H200 = DeviceFacts("NVIDIA H200", True, (9, 0), 132)
# the presets whose keys (values) the portable kernel reads through a pair table
TABLE_KEYS = {"turboquant_k3v4_nc", "turboquant_4bit_nc", "turboquant_3bit_nc", "tq_k4v3", "tq_k4v4"}
TABLE_VALUES = {"tq_k4v3", "tq_k4v4"}


@pytest.mark.parametrize("facts", [INTERPRETER, XPU, H200], ids=["interpreter", "xpu", "nvidia"])
def test_the_portable_kernel_reads_3_and_4_bit_codes_through_the_pair_table_on_every_device(facts):
    # KEY_LUT / VALUE_LUT follow the codes' widths alone (no knob, no device fact): 3- and
    # 4-bit codebook keys and calibrated values; not fp8 keys, 6-bit keys or 5-bit values
    for name in (*tq_core.PRESETS, *tq_core.CALIBRATED_PRESETS):
        p = tq_core.get_preset(name)
        fields = p.kernel_fields(p.block_layout(128, 16, 2)).constexprs()
        lp = plan.plan_attention(facts, p, fields, 8, 2, 3, 1, 16, config=AttentionConfig())
        assert lp.constexprs["KEY_LUT"] is (name in TABLE_KEYS), name
        assert lp.constexprs["VALUE_LUT"] is (name in TABLE_VALUES), name
        assert plan.served_by(lp) == "portable", name
        # the compile-time arguments the Xe2 compile check compiles
        cx = plan.kernel_constexprs(p, fields, AttentionConfig(), 4, 8, 1, 4)
        assert (cx["KEY_LUT"], cx["VALUE_LUT"]) == (name in TABLE_KEYS, name in TABLE_VALUES), name
    # gluon 2 off NVIDIA GPUs: the portable kernel, with the pair tables
    p = tq_core.get_preset("turboquant_k3v4_nc")
    fields = p.kernel_fields(p.block_layout(128, 16, 2)).constexprs()
    lp = plan.plan_attention(facts, p, fields, 8, 2, 3, 1, 16, config=AttentionConfig(gluon=2))
    if not facts.nvidia:
        assert plan.served_by(lp) == "portable" and lp.constexprs["KEY_LUT"] is True


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
def _decode_tile(W, Table, Out, Sq, BITS: tl.constexpr, T: tl.constexpr, D: tl.constexpr, TABLE: tl.constexpr):
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
    k16, sq = codebook_tile(ws, Table, BITS, T, D, TABLE)
    tl.store(Out + t * D + tl.arange(0, D)[None, :], k16)
    tl.store(Sq + tl.arange(0, T), sq)


@pytest.mark.parametrize(
    ("preset", "values"),
    [("turboquant_k3v4_nc", False), ("turboquant_4bit_nc", False), ("tq_k4v3", True), ("tq_k4v4", True)],
)
def test_the_pair_table_gives_the_gathered_centroids(preset, values, gen):
    # codebook_tile through the pair table against the same codes gathered from the fp16
    # codebook and against the codebook itself: every centroid bit for bit, the squared
    # norms close
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
    for kind, tab in ((False, cent), (True, pair_words(cent))):
        out = torch.zeros(T, D, dtype=torch.float16, device=dev)
        sq = torch.zeros(T, dtype=torch.float32, device=dev)
        _decode_tile[(1,)](w.to(dev), tab.to(dev), out, sq, bits, T, D, kind)
        outs[kind] = (out.cpu(), sq.cpu())
    want = cent[codes]
    for table, (out, sq) in outs.items():
        assert torch.equal(out.view(torch.int16), want.view(torch.int16)), (preset, table)
        torch.testing.assert_close(sq, want.float().pow(2).sum(1), rtol=2e-3, atol=0)


# 3-bit keys at every head_dim; 4-bit keys (the rest), with the calibrated formats' 3-bit
# (tq_k4v3) and 4-bit (tq_k4v4) values
TABLE_ROWS = [(p, d, g) for p in LUT_PRESETS for d, g in [(64, 1), (128, 4), (256, 8)]] + [
    ("turboquant_4bit_nc", 64, 2),
    ("tq_k4v3", 128, 4),
    ("tq_k4v4", 64, 1),
]


@pytest.mark.parametrize(("preset", "head_dim", "group"), TABLE_ROWS)
def test_attention_with_the_pair_tables(preset, head_dim, group, gen, device):
    # the portable kernel reads these codes through pair tables on every device
    shape = {"head_dim": head_dim, "num_kv_heads": 2, "group": group}
    b = make_batch(gen, preset, [1, 17, 70, 129], [1, 1, 8, 5], device=device, **shape)
    for splits in (1, 4):
        assert_close(*run_triton(b, splits=splits))


@pytest.mark.parametrize("splits", [1, 3])
def test_pair_tables_with_hostile_metadata_stay_inside_the_tensors(splits, gen, device, monkeypatch):
    """tq_k4v3's calibrated batch with hostile metadata (a block id far outside the cache, a
    seq_len past the block table, a query_start_loc past the rows) through the portable kernel,
    which reads its 4-bit keys and 3-bit values through pair tables: nothing outside the cache
    or ``out`` is read or written (canary bytes), and the valid request matches tq-core."""
    monkeypatch.setenv("TQ_GLUON", "0")
    check_calibrated_hostile_batch(gen, "tq_k4v3", 64, 2, splits, device)
