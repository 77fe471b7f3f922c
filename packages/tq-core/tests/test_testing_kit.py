"""The shared test and benchmark kit, ``tq_core.testing``: batches, the dense oracle, the tolerance rule."""

from __future__ import annotations

import math

import pytest
import torch
from tqc_helpers import PRESET_NAMES

import tq_core
from tq_core import decode_kv, encode_kv
from tq_core.testing import (
    assert_attention_close,
    attention_error,
    block_tables,
    dense_attention,
    paged_batch,
    ragged_lengths,
)
from tq_core.testing.plugin import test_seed as seed_from_env

# ---------------------------------------------------------------- block tables and batches


def _check_tables(num_blocks, table, slots, seq_lens, bs):
    nblocks = [math.ceil(s / bs) for s in seq_lens]
    assert table.dtype == torch.int32 and slots.dtype == torch.int64
    assert table.shape == (len(seq_lens), max([*nblocks, 1]) + 1)
    used = [int(b) for r, n in enumerate(nblocks) for b in table[r, :n]]
    assert len(set(used)) == len(used), "a physical block is shared by two positions"
    assert all(0 <= b < num_blocks for b in used)
    assert num_blocks >= len(used)
    # slot_mapping: request-major, every position in order, at block_table[pos // bs] * bs + pos % bs
    assert slots.shape == (sum(seq_lens),)
    t = 0
    for r, s in enumerate(seq_lens):
        for pos in range(s):
            assert int(slots[t]) == int(table[r, pos // bs]) * bs + pos % bs, (r, pos)
            t += 1
    assert len(set(slots.tolist())) == len(slots)


@pytest.mark.parametrize("bs", [8, 16])
def test_block_tables_garbage_past_the_used_blocks(gen, bs):
    seq_lens = [1, 40, 16, 0, 17]
    num_blocks, table, slots = block_tables(gen, seq_lens, bs, spare_blocks=2, unused="garbage")
    _check_tables(num_blocks, table, slots, seq_lens, bs)
    assert num_blocks == sum(math.ceil(s / bs) for s in seq_lens) + 2
    for r, s in enumerate(seq_lens):
        rest = table[r, math.ceil(s / bs) :]
        assert bool(((rest < 0) | (rest >= num_blocks)).all()), f"row {r}: an unused entry names a real block"


def test_block_tables_real_ids_past_the_used_blocks(gen):
    seq_lens = [3, 50, 33]
    num_blocks, table, slots = block_tables(gen, seq_lens, 16, unused="real")
    _check_tables(num_blocks, table, slots, seq_lens, 16)
    assert bool(((table >= 0) & (table < num_blocks)).all())


def test_block_tables_shuffle_blocks_and_reject_unknown_unused(gen):
    _, table, _ = block_tables(gen, [16 * 40], 16, spare_blocks=0)
    assert sorted(table[0, :40].tolist()) == list(range(40))
    assert table[0, :40].tolist() != list(range(40))  # 1 in 40! to fail by chance
    with pytest.raises(ValueError, match="unused="):
        block_tables(gen, [3], 16, unused="zeros")


def test_ragged_lengths(gen):
    seq_lens, q_lens = ragged_lengths(gen, 50, 6, 40)
    assert len(seq_lens) == len(q_lens) == 50
    assert all(1 <= q <= 6 and q <= s <= 40 for s, q in zip(seq_lens, q_lens, strict=True))
    assert q_lens.count(1) > 0 and max(q_lens) > 1


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("unused", ["garbage", "real"])
def test_paged_batch_holds_what_it_says(gen, name, unused):
    seq_lens, q_lens = [20, 1, 35], [4, 1, 0]
    b = paged_batch(gen, name, seq_lens, q_lens, head_dim=64, num_kv_heads=2, group=3, block_size=8, unused=unused)
    num_blocks = b.kv_cache.shape[0]
    _check_tables(num_blocks, b.block_table, b.slot_mapping, seq_lens, 8)
    real_ids = (b.block_table >= 0) & (b.block_table < num_blocks)
    if unused == "real":
        assert bool(real_ids.all())
    else:  # only the used entries name real blocks
        assert int(real_ids.sum()) == sum(math.ceil(s / 8) for s in seq_lens)
    assert b.query.shape == (5, 6, 64) and b.num_q_heads == 6 and b.max_query_len == 4
    assert b.key.shape == b.value.shape == (56, 2, 64)
    assert b.seq_lens.tolist() == seq_lens and b.query_start_loc.tolist() == [0, 4, 5, 5]
    assert b.scale == pytest.approx(64**-0.5)
    assert b.kv_cache.shape[1:] == (8, 2, b.preset.layout(64).slot_size_aligned)
    # the cache holds the encoded K/V at slot_mapping: same as encode_kv's slots read back
    k_ref, v_ref = decode_kv(encode_kv(b.key, b.value, name), name, 64)
    k, v = b.decoded_kv()
    assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
    assert torch.equal(b.reference(), tq_core.attention(*b.args()))


def test_paged_batch_dense_reference_agrees_with_the_reference_op(gen):
    b = paged_batch(gen, "turboquant_4bit_nc", [30, 9], [3, 2], head_dim=64, block_size=16)
    assert_attention_close(b.reference(), b.dense_reference(), tol=1e-5)
    # over the original (unquantized) K/V the error is the codec's, larger but bounded
    err = attention_error(b.reference(), b.dense_reference(decoded=False))
    assert 1e-5 < err < 0.3


def test_paged_batch_is_seeded_and_rejects_bad_lengths():
    a = paged_batch(torch.Generator().manual_seed(5), "turboquant_k8v4", [9], [2], head_dim=64, data="llm")
    b = paged_batch(torch.Generator().manual_seed(5), "turboquant_k8v4", [9], [2], head_dim=64, data="llm")
    assert torch.equal(a.kv_cache, b.kv_cache) and torch.equal(a.query, b.query)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="q_lens"):
        paged_batch(g, "turboquant_k8v4", [3], [4], head_dim=64)
    with pytest.raises(ValueError, match="q_lens"):
        paged_batch(g, "turboquant_k8v4", [3, 4], [1], head_dim=64)
    with pytest.raises(ValueError, match="data="):
        paged_batch(g, "turboquant_k8v4", [3], [1], head_dim=64, data="uniform")


# ---------------------------------------------------------------- dense_attention


def brute_force(q, k, v, seq_lens, q_lens, scale):
    """Scalar Python: out[i][h][c] = sum_j softmax_j(scale * q.k_j) v_j[c] over the visible j."""
    hq, hk, d = len(q[0]), len(k[0]), len(q[0][0])
    out = []
    t0 = q0 = 0
    for s, ql in zip(seq_lens, q_lens, strict=True):
        for i in range(ql):
            row = []
            for h in range(hq):
                kh = h // (hq // hk)
                visible = range(t0, t0 + s - ql + i + 1)
                logits = [scale * sum(q[q0 + i][h][c] * k[j][kh][c] for c in range(d)) for j in visible]
                m = max(logits)
                w = [math.exp(x - m) for x in logits]
                row.append([sum(wj * v[j][kh][c] for wj, j in zip(w, visible, strict=True)) / sum(w) for c in range(d)])
            out.append(row)
        t0, q0 = t0 + s, q0 + ql
    return out


def test_dense_attention_against_brute_force(gen):
    seq_lens, q_lens, hq, hk, d = [5, 1, 4], [2, 1, 4], 4, 2, 3
    q = torch.randn(sum(q_lens), hq, d, generator=gen)
    k = torch.randn(sum(seq_lens), hk, d, generator=gen) * 2
    v = torch.randn(sum(seq_lens), hk, d, generator=gen)
    out = dense_attention(q, k, v, seq_lens, q_lens, 0.7)
    assert out.dtype == torch.float64 and out.shape == (7, hq, d)
    expected = torch.tensor(brute_force(q.tolist(), k.tolist(), v.tolist(), seq_lens, q_lens, 0.7), dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_dense_attention_first_token_sees_only_itself():
    q = torch.randn(1, 2, 4)
    k, v = torch.randn(3, 1, 4), torch.randn(3, 1, 4)
    out = dense_attention(q, k[:1], v[:1], [1], [1], 1.0)
    assert torch.equal(out[0], v[0].double().expand(2, 4))


def test_dense_attention_rejects_bad_shapes():
    q, kv = torch.zeros(2, 3, 4), torch.zeros(4, 2, 4)
    with pytest.raises(ValueError, match="multiple"):
        dense_attention(q, kv, kv, [4], [2], 1.0)
    with pytest.raises(ValueError, match="exceeds"):
        dense_attention(torch.zeros(2, 2, 4), kv, kv, [1, 3], [2, 0], 1.0)


# ---------------------------------------------------------------- the tolerance rule


def test_attention_error_is_relative_to_the_output_scale():
    expected = torch.tensor([[[4.0, -2.0]], [[1.0, 0.0]]])
    actual = expected.clone()
    actual[1, 0, 1] = 0.2
    assert attention_error(actual, expected) == pytest.approx(0.2 / 4)
    assert attention_error(actual, expected, scale=0.5) == pytest.approx(0.2 / 0.5)
    assert attention_error(expected, expected) == 0.0
    with pytest.raises(ValueError, match="shapes differ"):
        attention_error(actual[:1], expected)


def test_assert_attention_close_passes_within_tol(gen):
    expected = torch.randn(6, 4, 8, generator=gen, dtype=torch.float64)
    noise = 2 * torch.rand(6, 4, 8, generator=gen, dtype=torch.float64) - 1  # in [-1, 1)
    actual = expected + 1e-4 * float(expected.abs().max()) * noise
    err = assert_attention_close(actual, expected, tol=1.01e-4)
    assert 0 < err <= 1.01e-4


def test_assert_attention_close_fails_on_a_perturbed_output(gen):
    expected = torch.randn(6, 4, 8, generator=gen, dtype=torch.float64)
    actual = expected.clone()
    actual[3, 2, 5] += 0.01 * float(expected.abs().max())
    with pytest.raises(AssertionError, match=r"what-it-is: error 0\.01.* exceeds tol 0\.001.*index \[3, 2, 5\]"):
        assert_attention_close(actual, expected, tol=1e-3, what="what-it-is")
    assert_attention_close(actual, expected, tol=0.0101)


def test_assert_attention_close_fails_on_nan():
    expected = torch.ones(2, 2, 2)
    actual = expected.clone()
    actual[1, 0, 1] = float("nan")
    assert attention_error(actual, expected) == math.inf
    with pytest.raises(AssertionError, match=r"index \[1, 0, 1\]: got nan"):
        assert_attention_close(actual, expected, tol=1e9)


# ---------------------------------------------------------------- the pytest plugin's seed


def test_seed_replays_from_the_environment(monkeypatch):
    monkeypatch.setenv("TQ_TEST_SEED", "1234")
    assert seed_from_env() == 1234
    monkeypatch.setenv("TQ_TEST_SEED", "12x")
    with pytest.raises(pytest.UsageError, match="TQ_TEST_SEED"):
        seed_from_env()
    monkeypatch.delenv("TQ_TEST_SEED")
    assert len({seed_from_env() for _ in range(8)}) > 1
