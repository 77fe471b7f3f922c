"""No input makes tq_triton (or torch.ops.tq) read or write outside its tensors.

Each case gives a named error, or tq_core's result on the valid part, and leaves every byte
outside the cache / ``out`` views as it was (canary bytes around them). Small shapes, so
the interpreter is quick and compute-sanitizer can run the file on a GPU.
"""

from __future__ import annotations

import threading

import pytest
import torch
from tqt_canary import OUT_FILL, cache_canary, fill_free_slots, out_canary, request_reference
from tqt_helpers import TOL, make_batch, reference

import tq_core
import tq_triton
from tq_core.testing import assert_attention_close
from tq_triton.attention import launch

PRESET = "turboquant_k3v4_nc"
D = 64
GROUP = 2
BS = 16
# request 0 is a decode over two full blocks (its third block-table entry is garbage), so that
# a clamped or masked view of it is again a plain decode tq_core can compute
SEQ_LENS = [32, 20, 7]
Q_LENS = [1, 3, 2]
ROWS = [(0, 1), (1, 4), (4, 6)]


def batch(gen, device):
    """The batch, with every slot no request uses filled too: a bad block id is read as the
    last block, which then holds finite data whatever the block table."""
    b = make_batch(gen, PRESET, SEQ_LENS, Q_LENS, head_dim=D, num_kv_heads=1, group=GROUP, block_size=BS, device=device)
    return fill_free_slots(b, gen)


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert_attention_close(got.float(), want.float(), tol=TOL, what=what)


# ---------------------------------------------------------------------------------------- store


def store_inputs(gen, device, n):
    k = torch.randn(n, 1, D, generator=gen).to(device)
    v = torch.randn(n, 1, D, generator=gen).to(device)
    slot = tq_core.get_preset(PRESET).layout(D).slot_size_aligned
    cache = torch.randint(0, 256, (4, BS, 1, slot), generator=gen, dtype=torch.uint8).to(device)
    return k, v, cache


def assert_store_matches(got: torch.Tensor, ref: torch.Tensor, tokens: int) -> None:
    """Byte-identical up to rounding-boundary codes (at most a couple of bytes per token); a
    token written to another slot changes a whole slot's bytes twice."""
    differing = int((got != ref).sum())
    assert differing <= 2 * tokens, f"{differing} bytes differ from tq_core.store"


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_store_skips_slots_outside_the_cache(index_dtype, gen, device):
    k, v, cache = store_inputs(gen, device, 9)
    num_slots = cache.shape[0] * BS
    slots = [0, 5, num_slots, num_slots + 17, 10**8, -1, 17, num_slots - 1, -(10**8)]
    if index_dtype == torch.int64:
        slots[4] = 2**62
    sm = torch.tensor(slots, dtype=index_dtype, device=device)
    c = cache_canary(cache)
    tq_triton.store(k, v, c.view, sm, PRESET)
    c.assert_outside_unchanged()
    ref = cache.clone()
    valid = torch.where((sm >= 0) & (sm < num_slots), sm, -1)
    tq_core.store(k, v, ref, valid, PRESET)
    assert_store_matches(c.view, ref, 4)


@pytest.mark.parametrize("via_op", [False, True])
def test_store_reads_slot_mapping_through_its_stride(via_op, gen, device):
    k, v, cache = store_inputs(gen, device, 4)
    wide = torch.full((8,), 10**8, dtype=torch.int64, device=device)
    wide[::2] = torch.tensor([0, 5, 10, 15], device=device)
    sm = wide[::2]  # the gaps hold a slot far outside the cache
    c = cache_canary(cache)
    if via_op:
        torch.ops.tq.store(k, v, c.view, sm, PRESET)
    else:
        tq_triton.store(k, v, c.view, sm, PRESET)
    c.assert_outside_unchanged()
    ref = cache.clone()
    tq_core.store(k, v, ref, sm.contiguous(), PRESET)
    assert_store_matches(c.view, ref, 4)


def test_store_duplicate_slots(monkeypatch, gen, device):
    k, v, cache = store_inputs(gen, device, 3)
    sm = torch.tensor([3, 3, 9], device=device)
    monkeypatch.setenv("TQ_DEBUG", "1")
    with pytest.raises(tq_core.RangeError, match="twice"):
        tq_triton.store(k, v, cache.clone(), sm, PRESET)
    monkeypatch.setenv("TQ_DEBUG", "0")
    c = cache_canary(cache)
    tq_triton.store(k, v, c.view, sm, PRESET)
    c.assert_outside_unchanged()
    # slot 3 holds an undefined mix of tokens 0 and 1 (its fields lie apart in the block):
    # overwritten by token 0 in both, every byte must then be as tq_core writes it
    ref = cache.clone()
    tq_core.store(k[1:], v[1:], ref, sm[1:], PRESET)
    got = c.view.clone()
    for cache_ in (got, ref):
        tq_core.store(k[:1], v[:1], cache_, sm[:1], PRESET)
    assert_store_matches(got, ref, 2)


# ------------------------------------------------------------------------------------ attention


def run(b, bt, sl, qsl, splits, *, max_query_len=None):
    """tq_triton.attention into an ``out`` view and over a cache view, both with canaries."""
    c = cache_canary(b.kv_cache)
    o = out_canary(b.query)
    res = tq_triton.attention(
        b.query, c.view, bt, sl, qsl, b.preset, b.scale, out=o.view, num_kv_splits=splits, max_query_len=max_query_len
    )
    assert res is o.view
    c.assert_outside_unchanged()
    assert torch.equal(c.view, b.kv_cache), "attention wrote into the cache"
    o.assert_outside_unchanged()
    return o.view


def _set(t, index, value):
    t = t.clone()
    t[index] = value
    return t


# Each case: (metadata edit, {request: (seq_len it is computed over, its rows)} compared with
# tq_core, rows that must be 0, rows that must be left unwritten). tq_core is given the block
# table with every id outside the cache replaced by the last block's (the kernel reads such a
# block as the last one), so request 0 with a bad id, or read to the table's capacity, has a
# reference too. Request 0 is a decode of 32 positions over 2 blocks; the block table has 3
# columns (cap 48).
CASES = {
    "block_id_num_blocks": ("bt", (0, 1), "nb", {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "block_id_-1": ("bt", (0, 1), -1, {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "block_id_1e8": ("bt", (0, 1), 10**8, {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "block_id_-1e8": ("bt", (0, 0), -(10**8), {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "block_id_2^40_int64": ("bt64", (0, 1), 2**40, {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "seq_len_past_table": ("sl", 0, 10**6, {0: (48, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "seq_len_negative": ("sl", 2, -5, {0: (32, (0, 1)), 1: (20, (1, 4))}, [4, 5], []),
    "q_len_past_seq_len": ("sl", 2, 1, {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (1, (5, 6))}, [4], []),
    "qsl_last_past_rows": ("qsl", 3, 6 + 5, {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "qsl_last_1e9": ("qsl", 3, 10**9, {0: (32, (0, 1)), 1: (20, (1, 4)), 2: (7, (4, 6))}, [], []),
    "qsl_last_short": ("qsl", 3, 5, {0: (32, (0, 1)), 1: (20, (1, 4))}, [], [5]),
    # [0, 1, 6, 4]: rows = 4, so request 1 keeps rows 1..3 and request 2 has none
    "qsl_non_monotone": ("qsl", (2, 3), (6, 4), {0: (32, (0, 1)), 1: (20, (1, 4))}, [], [4, 5]),
    "qsl_negative": ("qsl", 1, -7, {2: (7, (4, 6))}, [], []),
}


# split_budget 8: kv splits sized from the batch's (clamped) lengths (AttentionConfig.split_budget);
# skip "1": empty kv splits skipped (AttentionConfig.skip_empty)
SPLIT_MODES = [(1, 0, "0"), (3, 0, "0"), (3, 8, "0"), (3, 0, "1"), (3, 8, "1")]


@pytest.mark.parametrize(("splits", "budget", "skip"), SPLIT_MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_out_of_range_metadata(case, splits, budget, skip, gen, device, monkeypatch):
    monkeypatch.setenv("TQ_SPLIT_BUDGET", str(budget))
    monkeypatch.setenv("TQ_SKIP_EMPTY", skip)
    what, index, value, valid, zero_rows, unwritten = CASES[case]
    b = batch(gen, device)
    bt, sl, qsl = b.block_table, b.seq_lens, b.query_start_loc
    if value == "nb":
        value = b.kv_cache.shape[0]
    if what == "bt":
        bt = _set(bt, index, value)
    elif what == "bt64":
        bt = _set(bt.long(), index, value)
    elif what == "sl":
        sl = _set(sl, index, value)
    else:
        if isinstance(index, tuple):
            index, value = list(index), torch.tensor(value, dtype=qsl.dtype, device=device)
        qsl = _set(qsl, index, value)
    out = run(b, bt, sl, qsl, splits)
    nb = b.kv_cache.shape[0]
    read_as = torch.where((bt >= 0) & (bt < nb), bt, nb - 1)
    for r, (seq_len, rows) in valid.items():
        close(out[rows[0] : rows[1]], request_reference(b, r, seq_len, rows, block_table=read_as), f"request {r}")
    for row in zero_rows:
        assert torch.equal(out[row], torch.zeros_like(out[row])), f"row {row} should be 0"
    for row in unwritten:
        assert bool((out[row] == OUT_FILL).all()), f"row {row} was written"
    # every slot of the cache holds finite data: a NaN could only come from the canary bytes
    # (0xFF) around it
    assert bool(out[: int(qsl[-1].clamp(0, out.shape[0]))].isfinite().all())


@pytest.mark.parametrize("strided", ["block_table_rows", "block_table_cols", "seq_lens", "query_start_loc", "all"])
@pytest.mark.parametrize("via_op", [False, True])
def test_attention_reads_index_tensors_through_their_strides(strided, via_op, gen, device):
    b = batch(gen, device)
    bt, sl, qsl = b.block_table, b.seq_lens, b.query_start_loc
    big = 10**6  # in the gaps: read as an index, it is far outside every tensor
    if strided in ("block_table_rows", "all"):
        wide = torch.full((2 * bt.shape[0], bt.shape[1]), big, dtype=bt.dtype, device=device)
        wide[::2] = bt
        bt = wide[::2]
    if strided in ("block_table_cols", "all"):
        wide = torch.full((bt.shape[0], 2 * bt.shape[1]), big, dtype=bt.dtype, device=device)
        wide[:, ::2] = bt
        bt = wide[:, ::2]
    if strided in ("seq_lens", "all"):
        wide = torch.full((2 * sl.shape[0],), big, dtype=sl.dtype, device=device)
        wide[::2] = sl
        sl = wide[::2]
    if strided in ("query_start_loc", "all"):
        wide = torch.full((3 * qsl.shape[0],), big, dtype=qsl.dtype, device=device)
        wide[::3] = qsl
        qsl = wide[::3]
    want = reference(b)
    if via_op:  # the operators take no split count
        o = out_canary(b.query)
        torch.ops.tq.attention_out(b.query, b.kv_cache, bt, sl, qsl, PRESET, b.scale, o.view)
        o.assert_outside_unchanged()
        close(o.view, want, f"torch.ops.tq.attention_out, {strided}")
        close(torch.ops.tq.attention(b.query, b.kv_cache, bt, sl, qsl, PRESET, b.scale), want, "torch.ops.tq.attention")
        return
    for splits in (1, 3):
        o = out_canary(b.query)
        tq_triton.attention(b.query, b.kv_cache, bt, sl, qsl, PRESET, b.scale, out=o.view, num_kv_splits=splits)
        o.assert_outside_unchanged()
        close(o.view, want, f"{strided}, {splits} splits")


def test_debug_mode_raises_for_out_of_range_metadata(monkeypatch, gen, device):
    b = batch(gen, device)
    monkeypatch.setenv("TQ_DEBUG", "1")
    for bt, sl, qsl in (
        (_set(b.block_table, (0, 1), b.kv_cache.shape[0]), b.seq_lens, b.query_start_loc),
        (b.block_table, _set(b.seq_lens, 0, 10**6), b.query_start_loc),
        (b.block_table, _set(b.seq_lens, 2, 1), b.query_start_loc),
        (b.block_table, b.seq_lens, _set(b.query_start_loc, 3, 11)),
    ):
        with pytest.raises(tq_core.RangeError):
            tq_triton.attention(b.query, b.kv_cache, bt, sl, qsl, PRESET, b.scale)


# The LayoutError for `out` comes from tq_core's check_attention_args.
@pytest.mark.parametrize("kind", ["last_stride_2", "expanded"])
@pytest.mark.parametrize("via_op", [False, True])
def test_out_layout_is_validated(kind, via_op, gen, device):
    b = batch(gen, device)
    nq, hq, d = b.query.shape
    if kind == "last_stride_2":
        base = torch.full((nq, hq, 2 * d), OUT_FILL, device=device)
        out = base[..., ::2]
    else:
        base = torch.full((1, hq, d), OUT_FILL, device=device)
        out = base.expand(nq, hq, d)
    before = base.clone()
    with pytest.raises(tq_core.LayoutError, match="out"):
        if via_op:
            torch.ops.tq.attention_out(*b.args()[:5], PRESET, b.scale, out)
        else:
            tq_triton.attention(*b.args(), out=out)
    assert torch.equal(base, before)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("num_kv_splits", -1),
        ("num_kv_splits", 0),
        ("num_kv_splits", True),
        ("num_kv_splits", 2.5),
        ("max_query_len", 2.5),
        ("max_query_len", -1),
        ("max_query_len", True),
    ],
)
def test_split_count_and_hint_are_validated(name, value, gen, device):
    b = batch(gen, device)
    out = torch.full_like(b.query, OUT_FILL)
    with pytest.raises(tq_core.RangeError, match=name):
        tq_triton.attention(*b.args(), out=out, **{name: value})
    assert bool((out == OUT_FILL).all())


def test_more_than_128_q_heads_per_kv_head_is_a_shape_error(device):
    slot = tq_core.get_preset(PRESET).layout(D).slot_size_aligned
    cache = torch.zeros(1, BS, 1, slot, dtype=torch.uint8, device=device)
    q = torch.randn(1, 129, D, device=device)
    meta = (
        torch.zeros(1, 1, dtype=torch.int32, device=device),
        torch.ones(1, dtype=torch.int32, device=device),
        torch.tensor([0, 1], dtype=torch.int32, device=device),
    )
    with pytest.raises(tq_core.ShapeError, match="129"):
        tq_triton.attention(q, cache, *meta, PRESET, 0.1)
    with pytest.raises(tq_core.ShapeError, match="129"):
        torch.ops.tq.attention(q, cache, *meta, PRESET, 0.1)


@pytest.mark.parametrize("on_meta", ["query", "kv_cache", "block_table"])
def test_operators_with_tensors_on_mixed_devices_raise(on_meta, gen, device):
    b = batch(gen, device)
    args = dict(zip(("query", "kv_cache", "block_table", "seq_lens", "query_start_loc"), b.args()[:5], strict=True))
    args[on_meta] = args[on_meta].to("meta")
    with pytest.raises(tq_core.DeviceError):
        torch.ops.tq.attention(*args.values(), PRESET, b.scale)
    with pytest.raises(tq_core.DeviceError):
        torch.ops.tq.attention_out(*args.values(), PRESET, b.scale, torch.empty_like(b.query))
    k = torch.randn(2, 1, D, device=device)
    with pytest.raises(tq_core.DeviceError):
        torch.ops.tq.store(k, k, b.kv_cache.to("meta"), torch.tensor([0, 1], device=device), PRESET)


# --------------------------------------------------------------------------------- concurrency


def test_concurrent_split_calls_do_not_share_workspaces(monkeypatch, gen, device):
    """Two threads, each with its own inputs and kv splits; both attention kernels run before
    either merge (a barrier in front of the merge launch), so buffers shared between calls
    would hand one call's partial results to the other."""
    batches = [batch(gen, device) for _ in range(2)]
    wants = [reference(b) for b in batches]
    barrier = threading.Barrier(2, timeout=600)
    # the interpreter runs one kernel at a time (it patches triton.language while it runs)
    one_at_a_time = threading.Lock()

    class Launch:
        def __init__(self, kernel, wait: bool) -> None:
            self.kernel, self.wait = kernel, wait

        def __getitem__(self, grid):
            def go(*args, **kwargs):
                if self.wait:
                    barrier.wait()
                with one_at_a_time:
                    return self.kernel[grid](*args, **kwargs)

            return go

    monkeypatch.setattr(launch, "attention_kernel", Launch(launch.attention_kernel, wait=False))
    monkeypatch.setattr(launch, "merge_kernel", Launch(launch.merge_kernel, wait=True))
    outs: list[torch.Tensor | None] = [None, None]
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            outs[i] = tq_triton.attention(*batches[i].args(), num_kv_splits=3)
            if device.type == "cuda":
                torch.cuda.synchronize()
        except BaseException as e:  # reported in the main thread
            barrier.abort()
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        close(outs[i], wants[i], f"thread {i}")
