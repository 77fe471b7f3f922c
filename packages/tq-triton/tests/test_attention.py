"""tq_triton.attention against tq_core.attention (the reference) on ragged decode + verify batches."""

from __future__ import annotations

import importlib

import pytest
import torch
import triton
import triton.language as tl
from tqt_helpers import ON_GPU, assert_close, make_batch, reference, run_triton

import tq_core
import tq_triton
from tq_triton.attention import plan
from tq_triton.attention.bounds import balanced_chunk, request_bounds
from tq_triton.attention.plan import kernel_constexprs
from tq_triton.tuning import AttentionConfig

PRESETS = list(tq_core.PRESETS)

if ON_GPU:
    SHORT = ([1, 17, 300, 2049], [1, 1, 8, 16])
    LONG = ([32768, 9001, 16384], [1, 8, 5])
else:
    SHORT = ([1, 17, 70, 129], [1, 1, 8, 5])
    LONG = ([700, 333], [1, 8])


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_matches_reference_ragged(preset, head_dim, group, gen, device):
    b = make_batch(gen, preset, *SHORT, head_dim=head_dim, num_kv_heads=2, group=group, device=device)
    assert_close(*run_triton(b))


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    ("block_size", "splits"),
    [
        (16, 32),
        (128, 1),
        (128, 32),
        # one split over the longest sequences: the value product's accumulation inside the
        # matrix unit must not drift with sequence length (tensor cores truncate)
        (16, 1),
    ],
)
def test_long_sequences_splits_and_value_accumulation(preset, block_size, splits, gen, device):
    b = make_batch(gen, preset, *LONG, head_dim=128, num_kv_heads=2, group=4, block_size=block_size, device=device)
    assert_close(*run_triton(b, splits=splits))


@pytest.mark.parametrize("preset", ["turboquant_k8v4", "turboquant_k3v4_nc", "tq_k4v3"])
@pytest.mark.parametrize(("block_size", "block_kv"), [(128, 32), (32, 32), (16, 64), (8, 32), (24, 16), (48, 32)])
def test_tiles_inside_blocks_across_blocks_and_neither(preset, block_size, block_kv, gen, device, monkeypatch):
    """The portable kernel addresses a tile by one block id where the tile lies inside one
    block (block size a multiple of the tile), by one id per whole block where the tile
    holds whole blocks, and by one id per position otherwise (block sizes that are not a
    power of two): each gives the reference's results over sequences of many tiles."""
    monkeypatch.setenv("TQ_GLUON", "0")
    monkeypatch.setenv("TQ_BLOCK_KV", str(block_kv))
    b = make_batch(gen, preset, *LONG, head_dim=64, num_kv_heads=2, group=4, block_size=block_size, device=device)
    assert_close(*run_triton(b, splits=4))


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_3bit_nc", "tq_k4v3"])
@pytest.mark.parametrize("transposed", [False, True])
def test_three_bit_words_loaded_either_way(preset, transposed, gen, device, monkeypatch):
    """The portable kernel loads 3-bit code words token-major or transposed
    (``plan.transposed_chunks`` picks by the Triton version): both give the reference's
    results, keys (k3v4_nc, 3bit_nc) and values (3bit_nc, tq_k4v3) alike."""
    monkeypatch.setenv("TQ_GLUON", "0")
    monkeypatch.setattr(plan, "transposed_chunks", lambda p: transposed)
    b = make_batch(gen, preset, *SHORT, head_dim=128, num_kv_heads=2, group=4, device=device)
    assert_close(*run_triton(b))


@pytest.mark.parametrize(
    ("preset", "version", "want"),
    [
        ("turboquant_k3v4_nc", (3, 6), True),
        ("tq_k4v3", (3, 5), True),
        ("turboquant_3bit_nc", (3, 7), False),
        ("turboquant_k3v4_nc", (4, 0), False),
        ("turboquant_k8v4", (3, 6), False),
        ("tq_k6v5", (3, 6), False),
    ],
)
def test_transposed_chunks_follow_the_triton_version(preset, version, want, monkeypatch):
    monkeypatch.setattr(plan, "_triton_version", lambda: version)
    p = tq_core.get_preset(preset)
    fields = p.kernel_fields(p.block_layout(128, 16, 2)).constexprs()
    assert kernel_constexprs(p, fields, AttentionConfig(), 4, 8, 1, 4)["CHUNKS_T"] is want


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
def test_edge_lengths(preset, gen, device):
    """q_len == seq_len, sequences shorter than the split count, a q_len=0 request, odd q_len."""
    b = make_batch(gen, preset, [5, 3, 1, 40, 9], [5, 0, 1, 11, 9], head_dim=64, num_kv_heads=1, group=3, device=device)
    for splits in (1, 7, 32):
        assert_close(*run_triton(b, splits=splits))


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
@pytest.mark.parametrize(
    ("budget", "splits"),
    [
        (1, 8),  # fewer programs than (request, kv head) pairs: one split per request
        (8, 8),  # the batch's total sets the split size: the longest request takes 6 splits
        (64, 3),  # the grid's 3 splits set it: every request fits in 3
    ],
)
def test_balanced_splits(preset, budget, splits, gen, device, monkeypatch):
    """``split_budget``: one split size for the whole batch, from its lengths, so a long
    request takes more of the grid's splits than a short one; every position is still
    attended to exactly once."""
    monkeypatch.setenv("TQ_SPLIT_BUDGET", str(budget))
    seq_lens, q_lens = [700, 5, 129, 1, 300, 64], [1, 2, 8, 1, 3, 0]
    b = make_batch(gen, preset, seq_lens, q_lens, head_dim=64, num_kv_heads=2, group=2, device=device)
    assert_close(*run_triton(b, splits=splits))


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
@pytest.mark.parametrize("budget", ["0", "8"])
@pytest.mark.parametrize("skip", ["0", "1"])
def test_empty_splits_write_no_partial_output(preset, budget, skip, gen, device, monkeypatch):
    """``skip_empty``: a kv split with no position for its rows (a short request's surplus
    splits) writes only its log-sum-exp (-inf), and the merge does not read its partial
    output: with the split workspace allocated NaN-filled, the result still matches
    tq-core, and the empty splits' partial outputs are still NaN. Without it, every split
    writes its partial output."""
    monkeypatch.setenv("TQ_SPLIT_BUDGET", budget)
    monkeypatch.setenv("TQ_SKIP_EMPTY", skip)
    launch_module = importlib.import_module("tq_triton.attention.launch")
    real_empty = torch.empty
    workspaces = []

    def nan_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.dtype.is_floating_point:
            t.fill_(float("nan"))
            workspaces.append(t)
        return t

    monkeypatch.setattr(launch_module.torch, "empty", nan_empty)
    seq_lens, q_lens = [3, 700, 40], [2, 8, 1]
    b = make_batch(gen, preset, seq_lens, q_lens, head_dim=64, num_kv_heads=2, group=2, device=device)
    splits = 8
    out, ref = run_triton(b, splits=splits)
    monkeypatch.setattr(launch_module.torch, "empty", real_empty)
    assert_close(out, ref)
    partial, lse = workspaces  # [rows * q heads * splits * D], [rows * q heads * splits]
    lse = lse.view(sum(q_lens), -1, splits)
    partial = partial.view(sum(q_lens), -1, splits, 64)
    # request 0 (3 positions, one 16-token tile at most): only its first split holds positions
    assert bool((lse[:2, :, 1:] == float("-inf")).all())
    if skip == "1":
        assert bool(partial[:2, :, 1:].isnan().all()), "an empty split wrote its partial output"
    else:
        assert bool(partial[:2].isfinite().all())
    assert bool(partial[:2, :, 0].isfinite().all())


@triton.jit
def _balanced_chunk_probe(SeqLens, Out, bt_cap, programs, NUM_SPLITS: tl.constexpr, BLOCK_KV: tl.constexpr):
    chunk = balanced_chunk(SeqLens, 1, bt_cap, programs, NUM_SPLITS, BLOCK_KV)
    first = (tl.program_id(0) == 0) & (tl.program_id(1) == 0) & (tl.program_id(2) == 0)
    tl.store(Out, chunk, mask=first)


@pytest.mark.parametrize(
    ("seq_lens", "heads", "splits", "programs", "want"),
    [
        # verify-32k on an H200 (4 programs per SM): 8 splits of 4096 fill one wave of 528
        ([32768] * 8, 8, 16, 4 * 132, 4544),
        # the bench's ragged batch: the longest request takes 19 splits
        ([16384, 9001, 30000, 517, 12345, 4099, 20000, 2048], 8, 32, 4 * 132, 1664),
        # fewer programs than pairs: one split takes the whole batch's work
        ([100, 5000], 4, 8, 4, 20416),
        # the grid's splits bound it from below; lengths clamped to [0, capacity]
        ([-3, 10**9, 7], 1, 4, 10**6, 16384),
        # at most the block table's capacity
        ([60000, 60000], 4, 8, 4, 1 << 16),
    ],
)
def test_balanced_chunk(seq_lens, heads, splits, programs, want, device):
    """The split size of ``split_budget`` for a batch (bounds.balanced_chunk_fn's rule)."""
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    out = torch.zeros(1, dtype=torch.int64, device=device)
    cap = 1 << 16  # the block table's capacity
    _balanced_chunk_probe[(len(seq_lens), heads, splits)](sl, out, cap, programs, NUM_SPLITS=splits, BLOCK_KV=64)
    assert int(out.item()) == want


@triton.jit
def _balanced_bounds_probe(SeqLens, QueryStart, Out, bt_cap, chunk, NUM_SPLITS: tl.constexpr, BLOCK_KV: tl.constexpr):
    _, _, _, kv_lo, kv_hi = request_bounds(
        SeqLens, QueryStart, 1, 1, bt_cap, 1 << 20, chunk, NUM_SPLITS, BLOCK_KV, True
    )
    at = (tl.program_id(0) * NUM_SPLITS + tl.program_id(2)) * 2
    tl.store(Out + at, kv_lo)
    tl.store(Out + at + 1, kv_hi)


@pytest.mark.parametrize(
    ("seq_lens", "chunk"),
    [
        ([32768] * 4, 4544),  # verify-32k: 8 splits of 64 tiles each
        ([30000, 16384, 517, 1, 0, 4099, 64, 65], 1664),  # the longest takes 19 splits
        ([1000, 10**6], 2048),  # lengths clamped to the capacity: 32 splits of 32 tiles
    ],
)
def test_balanced_bounds_deal_tiles_evenly(seq_lens, chunk, device):
    """``split_budget``'s per-request bounds (``chunk`` at least ``cdiv(longest, splits)``,
    as ``balanced_chunk`` makes it): ``cdiv(seq_len, chunk)`` splits cover the sequence
    exactly once, in whole tiles, with tile counts that differ by at most one;
    the grid's other splits are empty."""
    splits, bkv, cap = 32, 64, 1 << 16
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    qs = torch.zeros(len(seq_lens) + 1, dtype=torch.int32, device=device)
    out = torch.full((len(seq_lens), splits, 2), -1, dtype=torch.int32, device=device)
    _balanced_bounds_probe[(len(seq_lens), 1, splits)](sl, qs, out, cap, chunk, NUM_SPLITS=splits, BLOCK_KV=bkv)
    for r, n_pos in enumerate(seq_lens):
        n_pos = min(max(n_pos, 0), cap)
        bounds = out[r].tolist()
        used = [(lo, hi) for lo, hi in bounds if hi > lo]
        assert len(used) == -(-n_pos // chunk), (r, used)
        assert all(lo == hi for lo, hi in bounds[len(used) :])  # the rest: empty
        assert [lo for lo, _ in used] == [0, *(hi for _, hi in used[:-1])][: len(used)]  # contiguous
        assert (used[-1][1] if used else 0) == n_pos  # exact cover
        assert all(lo % bkv == 0 for lo, _ in used)  # whole tiles
        tiles = [-(-(hi - lo) // bkv) for lo, hi in used]
        assert not tiles or max(tiles) - min(tiles) <= 1, tiles


def test_balanced_splits_reach_the_kernel(monkeypatch):
    """``split_budget`` > 0 with more than one split compiles the kernel with ``BALANCE``."""
    p = tq_core.get_preset("turboquant_k8v4")
    fields = p.kernel_fields(p.block_layout(64, 16, 2)).constexprs()
    for budget, splits, want in ((0, 8, False), (4, 1, False), (4, 8, True)):
        cfg = tq_triton.tuning.AttentionConfig(split_budget=budget)
        assert kernel_constexprs(p, fields, cfg, 2, 4, splits, 1)["BALANCE"] is want


def test_query_longer_than_hint_is_still_correct(gen, device):
    """max_query_len is a tile-shape hint: a longer request must still be computed exactly."""
    b = make_batch(gen, "turboquant_k3v4_nc", [64, 80], [1, 21], head_dim=64, num_kv_heads=2, group=2, device=device)
    assert_close(*run_triton(b, max_query_len=1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_output_dtype_and_padding_rows(dtype, gen, device):
    """Output in the query's dtype; rows past query_start_loc[-1] (graph padding) untouched."""
    b = make_batch(
        gen, "turboquant_4bit_nc", [50, 33], [2, 3], head_dim=64, num_kv_heads=2, group=2, device=device, dtype=dtype
    )
    pad = torch.randn(4, *b.query.shape[1:], generator=gen).to(device, dtype)
    b.query = torch.cat([b.query, pad])
    for splits in (1, 4):
        out, ref = run_triton(b, splits=splits)
        assert out.dtype == dtype
        assert_close(out, ref, 5)
        assert torch.isnan(out[5:]).all(), "padding rows were written"


SMALL = {"head_dim": 64, "num_kv_heads": 1, "group": 2}


def test_allocates_output_when_none(gen, device):
    b = make_batch(gen, "turboquant_k8v4", [20], [2], device=device, **SMALL)
    out = tq_triton.attention(*b.args())
    assert out.shape == b.query.shape and out.dtype == b.query.dtype
    assert_close(out, reference(b))


def test_head_major_transposed_cache_view(gen, device):
    """vLLM's newer head-major allocation seen through a transposed view gives the same result."""
    b = make_batch(gen, "turboquant_k3v4_nc", [40, 70], [1, 4], head_dim=64, num_kv_heads=2, group=2, device=device)
    nb, bs, h, s = b.kv_cache.shape
    phys = torch.empty(nb, h, bs, s, dtype=torch.uint8, device=device)
    view = phys.transpose(1, 2)
    # same bytes per block, so copy block by block as raw memory
    phys.view(nb, -1).copy_(b.kv_cache.reshape(nb, -1))
    out, _ = run_triton(b)
    args = list(b.args())
    args[1] = view
    out2 = tq_triton.attention(*args)
    assert torch.equal(out, out2)
