"""The experimental two-per-word value decode (``value_words``): the decoded tile against the
bit stream through the column map, and attention with it against tq_core (both ways of
summing the value product)."""

from __future__ import annotations

import os

import pytest
import torch
from tqt_helpers import assert_close, make_batch, run_triton

import tq_core
from tq_triton.value_words import centred_values, value_columns


def test_tile_columns_follow_the_column_map(gen):
    import triton
    import triton.language as tl

    @triton.jit
    def decode(W, Out, Cols, T: tl.constexpr, D: tl.constexpr):
        t = tl.arange(0, T)
        w = tl.load(W + t[:, None] * (D // 8) + tl.arange(0, D // 8)[None, :]).to(tl.uint32)
        c = tl.arange(0, D)
        tl.store(Out + t[:, None] * D + c[None, :], centred_values(w, T, D))
        tl.store(Cols + c, value_columns(c))

    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("needs the Triton interpreter or a GPU")
    dev = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    t, d = 16, 64
    codes = torch.randint(0, 16, (t, d), generator=gen)
    shifts = 4 * torch.arange(8)
    words = (codes.view(t, d // 8, 8) << shifts).sum(-1)  # nibble j of word w = code 8w + j
    w32 = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32).to(dev)
    out = torch.empty(t, d, dtype=torch.float16, device=dev)
    cols = torch.empty(d, dtype=torch.int32, device=dev)
    decode[(1,)](w32, out, cols, t, d)
    cols = cols.long().cpu()
    assert sorted(cols.tolist()) == list(range(d)), "the column map must be a permutation"
    assert torch.equal(out.float().cpu(), (codes[:, cols] - 8).float())


@pytest.mark.parametrize("value_acc", ["0", "1"])
@pytest.mark.parametrize("preset", list(tq_core.PRESETS))
@pytest.mark.parametrize(("head_dim", "group"), [(64, 1), (128, 4)])
def test_attention_with_two_codes_per_word(preset, head_dim, group, value_acc, gen, device, monkeypatch):
    monkeypatch.setenv("TQ_VALUE_WORDS", "1")
    monkeypatch.setenv("TQ_VALUE_ACC", value_acc)
    shape = {"head_dim": head_dim, "num_kv_heads": 2, "group": group}
    b = make_batch(gen, preset, [1, 17, 70, 129], [1, 1, 8, 5], device=device, **shape)
    for splits in (1, 4):
        assert_close(*run_triton(b, splits=splits))
