"""tq_triton.attention against tq_core.attention (the reference) on ragged decode + verify batches."""

from __future__ import annotations

import pytest
import torch
from tqt_helpers import ON_GPU, gen, make_batch

import tq_core
import tq_triton

PRESETS = list(tq_core.PRESETS)
# fp16 operands in both products: relative L2 error of the output stays near 1e-3
RTOL = 1e-2

if ON_GPU:
    SHORT = ([1, 17, 300, 2049], [1, 1, 8, 16])
    LONG = ([32768, 9001, 16384], [1, 8, 5])
else:
    SHORT = ([1, 17, 70, 129], [1, 1, 8, 5])
    LONG = ([700, 333], [1, 8])


def run_both(b, splits=None, out_dtype=None):
    ref = tq_core.attention(
        b.query.float(), b.kv_cache, b.block_table, b.seq_lens, b.query_start_loc, b.preset, b.scale
    )
    out = torch.full_like(b.query, float("nan"), dtype=out_dtype or b.query.dtype)
    res = tq_triton.attention(
        b.query,
        b.kv_cache,
        b.block_table,
        b.seq_lens,
        b.query_start_loc,
        b.preset,
        b.scale,
        out=out,
        max_query_len=b.max_query_len,
        num_kv_splits=splits,
    )
    assert res is out
    return ref, out


def assert_close(ref: torch.Tensor, out: torch.Tensor, rows: int) -> None:
    got = out[:rows].float()
    assert torch.isfinite(got).all(), "NaN/inf in output rows (unwritten or broken merge)"
    err = ((got - ref[:rows]).norm() / ref[:rows].norm()).item()
    assert err < RTOL, f"relative L2 error {err:.3e}"
    # no single row may be far off either
    row_err = (got - ref[:rows]).norm(dim=-1) / ref[:rows].norm(dim=-1).clamp_min(1e-6)
    assert row_err.max().item() < 5 * RTOL, f"worst row error {row_err.max().item():.3e}"


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_matches_reference_ragged(preset, head_dim, group, seed, device):
    b = make_batch(
        preset,
        *SHORT,
        head_dim=head_dim,
        num_kv_heads=2,
        group=group,
        block_size=16,
        g=gen(seed, device),
        device=device,
    )
    ref, out = run_both(b)
    assert_close(ref, out, out.shape[0])


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize("splits", [1, 32])
def test_long_sequences_and_splits(preset, block_size, splits, seed, device):
    b = make_batch(
        preset, *LONG, head_dim=128, num_kv_heads=2, group=4, block_size=block_size, g=gen(seed, device), device=device
    )
    ref, out = run_both(b, splits=splits)
    assert_close(ref, out, out.shape[0])


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("value_acc", ["0", "1"])
def test_value_accumulation_modes(preset, value_acc, seed, device, monkeypatch):
    """Both ways of summing the value product, on one split over the longest sequences: the
    in-matrix-unit accumulation must not drift with sequence length (tensor cores truncate)."""
    monkeypatch.setenv("TQ_VALUE_ACC", value_acc)
    b = make_batch(
        preset, *LONG, head_dim=128, num_kv_heads=2, group=4, block_size=16, g=gen(seed, device), device=device
    )
    ref, out = run_both(b, splits=1)
    assert_close(ref, out, out.shape[0])


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
def test_edge_lengths(preset, seed, device):
    """q_len == seq_len, sequences shorter than the split count, a q_len=0 request, odd q_len."""
    b = make_batch(
        preset,
        [5, 3, 1, 40, 9],
        [5, 0, 1, 11, 9],
        head_dim=64,
        num_kv_heads=1,
        group=3,
        block_size=16,
        g=gen(seed, device),
        device=device,
    )
    for splits in (1, 7, 32):
        ref, out = run_both(b, splits=splits)
        assert_close(ref, out, out.shape[0])


def test_query_longer_than_hint_is_still_correct(seed, device):
    """max_query_len is a tile-shape hint: a longer request must still be computed exactly."""
    b = make_batch(
        "turboquant_k3v4_nc",
        [64, 80],
        [1, 21],
        head_dim=64,
        num_kv_heads=2,
        group=2,
        block_size=16,
        g=gen(seed, device),
        device=device,
    )
    b.max_query_len = 1
    ref, out = run_both(b)
    assert_close(ref, out, out.shape[0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_output_dtype_and_padding_rows(dtype, seed, device):
    """Output in the query's dtype; rows past query_start_loc[-1] (graph padding) untouched."""
    b = make_batch(
        "turboquant_4bit_nc",
        [50, 33],
        [2, 3],
        head_dim=64,
        num_kv_heads=2,
        group=2,
        block_size=16,
        g=gen(seed, device),
        device=device,
        dtype=dtype,
    )
    pad = torch.randn(4, *b.query.shape[1:], device=device).to(dtype)
    b.query = torch.cat([b.query, pad])
    for splits in (1, 4):
        ref, out = run_both(b, splits=splits)
        assert out.dtype == dtype
        assert_close(ref, out, 5)
        assert torch.isnan(out[5:]).all(), "padding rows were written"


def test_allocates_output_when_none(seed, device):
    b = make_batch(
        "turboquant_k8v4",
        [20],
        [2],
        head_dim=64,
        num_kv_heads=1,
        group=2,
        block_size=16,
        g=gen(seed, device),
        device=device,
    )
    out = tq_triton.attention(b.query, b.kv_cache, b.block_table, b.seq_lens, b.query_start_loc, b.preset, b.scale)
    ref = tq_core.attention(b.query, b.kv_cache, b.block_table, b.seq_lens, b.query_start_loc, b.preset, b.scale)
    assert out.shape == b.query.shape and out.dtype == b.query.dtype
    assert_close(ref.float(), out, 2)


def test_head_major_transposed_cache_view(seed, device):
    """vLLM's newer head-major allocation seen through a transposed view gives the same result."""
    b = make_batch(
        "turboquant_k3v4_nc",
        [40, 70],
        [1, 4],
        head_dim=64,
        num_kv_heads=2,
        group=2,
        block_size=16,
        g=gen(seed, device),
        device=device,
    )
    nb, bs, h, s = b.kv_cache.shape
    phys = torch.empty(nb, h, bs, s, dtype=torch.uint8, device=device)
    view = phys.transpose(1, 2)
    # same bytes per block, so copy block by block as raw memory
    phys.view(nb, -1).copy_(b.kv_cache.reshape(nb, -1))
    _, out = run_both(b)
    out2 = tq_triton.attention(b.query, view, b.block_table, b.seq_lens, b.query_start_loc, b.preset, b.scale)
    assert torch.equal(out, out2)
