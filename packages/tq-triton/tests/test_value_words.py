"""The column map of the two-per-word value decode (``value_words``), compiled by Triton (the
merge kernel) and as plain Python, against the word layout written out independently."""

from __future__ import annotations

import pytest
import torch

from tq_triton.value_words import value_columns, value_columns_fn, value_columns_in_head_order


def _expected(d: int) -> list[int]:
    """Column 8w + 2J + h holds nibble J + 4h of word w (pairs of nibbles 16 bits apart)."""
    return [8 * w + j + 4 * h for w in range(d // 8) for j in range(4) for h in range(2)]


@pytest.mark.parametrize("d", [64, 128, 256])
def test_column_map_is_the_word_layout(d):
    cols = [value_columns_fn(c) for c in range(d)]
    assert cols == _expected(d)
    assert sorted(cols) == list(range(d)), "the column map must be a permutation"


def test_triton_compiles_the_same_map(device):
    import triton
    import triton.language as tl

    @triton.jit
    def cols_kernel(Out, D: tl.constexpr):
        c = tl.arange(0, D)
        tl.store(Out + c, value_columns(c))

    d = 64
    out = torch.empty(d, dtype=torch.int32, device=device)
    cols_kernel[(1,)](out, d)
    assert out.cpu().tolist() == _expected(d)


@pytest.mark.parametrize("d", [64, 128])
def test_accumulator_goes_back_to_head_order(d, device):
    """``value_columns_in_head_order`` puts a tile whose column c holds dimension
    ``value_columns(c)`` (as the portable kernel's tq_k4v4 accumulator does) in head order."""
    import triton
    import triton.language as tl

    @triton.jit
    def back_kernel(X, Out, M: tl.constexpr, D: tl.constexpr):
        r = tl.arange(0, M)[:, None]
        c = tl.arange(0, D)[None, :]
        x = tl.load(X + r * D + c)
        tl.store(Out + r * D + c, value_columns_in_head_order(x, M, D))

    m = 16
    head = torch.randn(m, d, device=device)
    tile = head[:, _expected(d)].contiguous()  # column c holds dimension value_columns(c)
    out = torch.empty_like(tile)
    back_kernel[(1,)](tile, out, m, d)
    assert torch.equal(out, head)
