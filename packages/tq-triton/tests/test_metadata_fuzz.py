"""Hypothesis over metadata values: random block ids, seq_lens, query_start_loc and slot
mappings, valid or not. No write outside the cache / ``out`` views (canary bytes), no crash,
and tq_core's result for every request whose metadata is valid."""

from __future__ import annotations

import os

import pytest
import torch
from tqt_canary import cache_canary, fill_free_slots, out_canary, request_reference
from tqt_helpers import TOL, make_batch

import tq_core
import tq_triton
from tq_core.testing import assert_attention_close

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

PRESET = "turboquant_k8v4"
D, BS = 64, 16
DEVICE = torch.device(os.environ.get("TQ_TEST_DEVICE", "cpu"))
HOSTILE = [-1, -(10**8), -(2**31), 10**8, 2**31 - 1]


def _value(data, num: int) -> int:
    """An index value: in range, just past either end, or far outside."""
    return data.draw(st.one_of(st.integers(-2, num + 2), st.sampled_from(HOSTILE)))


@hypothesis.settings(max_examples=12)
@hypothesis.given(data=st.data())
def test_attention_metadata_fuzz(data):
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    q_lens = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3), label="q_lens")
    seq_lens = [q + data.draw(st.integers(0, 40)) for q in q_lens]
    gen = torch.Generator().manual_seed(seed)
    b = make_batch(
        gen,
        PRESET,
        seq_lens,
        q_lens,
        head_dim=D,
        num_kv_heads=1,
        group=2,
        block_size=BS,
        device=DEVICE,
    )
    # a valid-looking id may point at another request's block or an unused one: all hold tokens
    fill_free_slots(b, gen)
    nb, nq, num_reqs = b.kv_cache.shape[0], b.query.shape[0], len(q_lens)
    bt, sl, qsl = b.block_table.cpu().clone(), b.seq_lens.cpu().clone(), b.query_start_loc.cpu().clone()
    cap = bt.shape[1] * BS
    for _ in range(data.draw(st.integers(0, 3), label="bad block ids")):
        r, c = data.draw(st.integers(0, num_reqs - 1)), data.draw(st.integers(0, bt.shape[1] - 1))
        bt[r, c] = _value(data, nb)
    for r in data.draw(st.lists(st.integers(0, num_reqs - 1), max_size=2), label="bad seq_lens"):
        sl[r] = _value(data, cap)
    for i in data.draw(st.lists(st.integers(0, num_reqs), max_size=2), label="bad query_start_loc"):
        qsl[i] = _value(data, nq)
    splits = data.draw(st.sampled_from([1, 3]), label="splits")

    c, o = cache_canary(b.kv_cache), out_canary(b.query)
    tq_triton.attention(
        b.query, c.view, bt.to(DEVICE), sl.to(DEVICE), qsl.to(DEVICE), PRESET, b.scale, out=o.view, num_kv_splits=splits
    )
    c.assert_outside_unchanged()
    o.assert_outside_unchanged()
    assert torch.equal(c.view, b.kv_cache)

    # with a monotone query_start_loc inside the rows no two requests share a row
    rows_ok = int(qsl[0]) == 0 and bool((qsl[1:] >= qsl[:-1]).all()) and int(qsl[-1]) <= nq
    for r in range(num_reqs):
        s, q0, q1 = int(sl[r]), int(qsl[r]), int(qsl[r + 1])
        ids = bt[r, : (max(s, 0) + BS - 1) // BS]
        if rows_ok and q0 < q1 <= q0 + s and s <= cap and bool(((ids >= 0) & (ids < nb)).all()):
            want = request_reference(b, r, s, (q0, q1), bt)
            assert_attention_close(o.view[q0:q1].float(), want, tol=TOL, what=f"request {r}")


@hypothesis.settings(max_examples=12)
@hypothesis.given(data=st.data())
def test_store_slot_mapping_fuzz(data):
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    gen = torch.Generator().manual_seed(seed)
    n = data.draw(st.integers(1, 12), label="tokens")
    slot = tq_core.get_preset(PRESET).layout(D).slot_size_aligned
    cache = torch.randint(0, 256, (3, BS, 2, slot), generator=gen, dtype=torch.uint8).to(DEVICE)
    num_slots = 3 * BS
    slots = torch.tensor([_value(data, num_slots) for _ in range(n)], dtype=torch.int64)
    k = torch.randn(n, 2, D, generator=gen).to(DEVICE)
    v = torch.randn(n, 2, D, generator=gen).to(DEVICE)
    stride = data.draw(st.sampled_from([1, 2]), label="slot_mapping stride")
    wide = torch.full((n * stride,), 10**8, dtype=torch.int64)
    wide[::stride] = slots

    c = cache_canary(cache)
    tq_triton.store(k, v, c.view, wide.to(DEVICE)[::stride], PRESET)
    c.assert_outside_unchanged()

    # tq_core.store of the tokens with a valid slot; a slot that several tokens share ends up
    # with an undefined mix, so both caches get the first of them again before comparing
    valid = torch.where((slots >= 0) & (slots < num_slots), slots, -1)
    ref = cache.clone()
    tq_core.store(k, v, ref, _first_of_each(valid).to(DEVICE), PRESET)
    got = c.view.clone()
    shared = [i for i, s in enumerate(valid.tolist()) if s >= 0 and int((valid == s).sum()) > 1]
    if shared:
        idx = torch.tensor(shared)
        first = _first_of_each(valid[idx]).to(DEVICE)
        for cache_ in (got, ref):
            tq_core.store(k[idx.to(DEVICE)], v[idx.to(DEVICE)], cache_, first, PRESET)
    differing = int((got != ref).sum())
    assert differing <= 2 * n, f"{differing} bytes differ from tq_core.store"


def _first_of_each(slots: torch.Tensor) -> torch.Tensor:
    """``slots`` with every repeat of a slot after its first replaced by -1 (skipped)."""
    out, seen = slots.clone(), set()
    for i, s in enumerate(slots.tolist()):
        if s in seen:
            out[i] = -1
        seen.add(s)
    return out
