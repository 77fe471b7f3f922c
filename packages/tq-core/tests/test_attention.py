"""Reference attention vs an independent dense float64 attention over decode_kv's K/V."""

from __future__ import annotations

import math

import pytest
import torch
from tqc_helpers import PRESET_NAMES, randn

import tq_core
from tq_core import decode_kv, encode_kv, get_preset
from tq_core.attention import ROW_BY_ROW
from tq_core.testing import block_tables, dense_attention


def _run_case(gen, name, bs, group, seq_lens, q_lens, d=64, hk=2, dtype=torch.float32, scale=None, out_dtype=None):
    nb, table, slots = block_tables(gen, seq_lens, bs)
    total = sum(seq_lens)
    k, v = randn(gen, total, hk, d) * 2 + randn(gen, 1, hk, d), randn(gen, total, hk, d)
    cache = torch.zeros(nb, bs, hk, get_preset(name).layout(d).slot_size_aligned, dtype=torch.uint8)
    tq_core.store(k, v, cache, slots, name)
    hq = hk * group
    nq = sum(q_lens)
    extra = 2  # rows past query_start_loc[-1] must stay untouched
    q = randn(gen, nq + extra, hq, d, dtype=dtype) * 2
    qsl = torch.tensor([0, *torch.tensor(q_lens, dtype=torch.int64).cumsum(0).tolist()], dtype=torch.int32)
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = torch.full((nq + extra, hq, d), float("nan"), dtype=out_dtype or dtype)
    res = tq_core.attention(q, cache, table, torch.tensor(seq_lens, dtype=torch.int32), qsl, name, scale, out=out)
    assert res is out
    k_hat, v_hat = decode_kv(encode_kv(k, v, name), name, d)
    ref = dense_attention(q[:nq], k_hat, v_hat, seq_lens, q_lens, scale)
    return out, ref, nq


# q_len 0, 1, 3, 5 and q_len == seq_len; odd sequence lengths
SEQ_LENS = [17, 1, 33, 7, 129, 64]
Q_LENS = [3, 1, 0, 7, 5, 1]


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("bs", [16, 128])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_matches_dense_attention(gen, name, bs, group):
    out, ref, nq = _run_case(gen, name, bs, group, SEQ_LENS, Q_LENS)
    assert not torch.isnan(out[:nq]).any(), "a covered output row was not written"
    assert torch.isnan(out[nq:]).all(), "rows past query_start_loc[-1] were written"
    torch.testing.assert_close(out[:nq].double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_output_dtype_follows_query(gen, dtype):
    name, d, bs = "turboquant_k3v4_nc", 128, 16
    seq_lens, q_lens = [20, 9], [4, 1]
    nb, table, slots = block_tables(gen, seq_lens, bs)
    k, v = randn(gen, 29, 2, d), randn(gen, 29, 2, d)
    cache = torch.zeros(nb, bs, 2, 118, dtype=torch.uint8)
    tq_core.store(k, v, cache, slots, name)
    q = randn(gen, 5, 8, d, dtype=dtype)
    qsl = torch.tensor([0, 4, 5], dtype=torch.int32)
    out = tq_core.attention(q, cache, table, torch.tensor(seq_lens, dtype=torch.int32), qsl, name, 0.1)
    assert out.dtype == dtype and out.shape == q.shape
    k_hat, v_hat = decode_kv(encode_kv(k, v, name), name, d)
    ref = dense_attention(q, k_hat, v_hat, seq_lens, q_lens, 0.1)
    eps = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 1e-6}[dtype]
    torch.testing.assert_close(out.double(), ref, rtol=eps, atol=eps * float(ref.abs().max()))


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
def test_out_buffer_of_another_float_dtype(gen, out_dtype):
    out, ref, nq = _run_case(gen, "turboquant_4bit_nc", 16, 2, [9, 21], [2, 3], out_dtype=out_dtype)
    assert out.dtype == out_dtype and not torch.isnan(out[:nq]).any()
    torch.testing.assert_close(out[:nq].double(), ref, rtol=2.0**-7, atol=2.0**-7 * float(ref.abs().max()))


@pytest.mark.parametrize("d", [128, 256, 512])
def test_head_dims_and_scale(gen, d):
    out, ref, nq = _run_case(gen, "turboquant_3bit_nc", 16, 2, [19, 40], [2, 5], d=d, hk=1, scale=0.37)
    # float32 against float64: logits grow with d and scale, and a logit error e moves a
    # probability by a factor of exp(e), so the bound scales with the output's size (an
    # absolute 1e-5 is too tight at d=512)
    torch.testing.assert_close(out[:nq].double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_every_q_len_up_to_seq_len(gen):
    seq = 23
    q_lens = list(range(seq + 1))
    out, ref, nq = _run_case(gen, "turboquant_k8v4", 8, 2, [seq] * len(q_lens), q_lens, hk=1)
    assert not torch.isnan(out[:nq]).any()
    torch.testing.assert_close(out[:nq].double(), ref, rtol=1e-5, atol=1e-5)


def test_no_requests_leaves_out_untouched():
    name, d = "turboquant_k3v4_nc", 64
    cache = torch.zeros(2, 16, 1, get_preset(name).layout(d).slot_size_aligned, dtype=torch.uint8)
    out = torch.full((3, 2, d), float("nan"))
    res = tq_core.attention(
        torch.zeros(3, 2, d),
        cache,
        torch.zeros(0, 4, dtype=torch.int32),
        torch.zeros(0, dtype=torch.int32),
        torch.zeros(1, dtype=torch.int32),
        name,
        0.125,
        out=out,
    )
    assert res is out and torch.isnan(out).all()


def test_causality_future_tokens_do_not_matter(gen):
    """Changing tokens after a query's position leaves that query's output unchanged."""
    name, d, bs, hk = "turboquant_k3v4_nc", 64, 16, 1
    seq, ql = 40, 6
    nb, table, slots = block_tables(gen, [seq], bs)
    k, v = randn(gen, seq, hk, d), randn(gen, seq, hk, d)
    q = randn(gen, ql, 2, d)
    args = (table, torch.tensor([seq], dtype=torch.int32), torch.tensor([0, ql], dtype=torch.int32), name, 0.2)
    outs = []
    for trial in range(2):
        kk, vv = k.clone(), v.clone()
        if trial:
            kk[-1], vv[-1] = kk[-1] * 7 + 1, vv[-1] - 3  # the newest token only
        cache = torch.zeros(nb, bs, hk, get_preset(name).layout(d).slot_size_aligned, dtype=torch.uint8)
        tq_core.store(kk, vv, cache, slots, name)
        outs.append(tq_core.attention(q, cache, *args))
    assert torch.equal(outs[0][:-1], outs[1][:-1])
    assert not torch.equal(outs[0][-1], outs[1][-1])


@pytest.mark.parametrize("name", ["turboquant_k8v4", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
@pytest.mark.parametrize("q_len", [2, 5, 16, 17])
def test_verified_rows_equal_decode_steps_bit_for_bit(gen, name, q_len):
    """A request of up to ROW_BY_ROW query tokens (speculative verification) gives each row
    exactly what a decode step at its position gives (same products, same shapes), on any
    host; a prompt chunk (17 rows) takes one product over its rows and is only close."""
    seq_len, d, hk, group = 300, 64, 3, 3
    nb, table, slots = block_tables(gen, [seq_len], 16)
    k, v = randn(gen, seq_len, hk, d), randn(gen, seq_len, hk, d)
    cache = torch.zeros(nb, 16, hk, get_preset(name).layout(d).slot_size_aligned, dtype=torch.uint8)
    tq_core.store(k, v, cache, slots, name)
    q = randn(gen, q_len, hk * group, d, dtype=torch.bfloat16)
    one = torch.tensor([0, 1], dtype=torch.int32)
    verify = tq_core.attention(q, cache, table, torch.tensor([seq_len], dtype=torch.int32),
                               torch.tensor([0, q_len], dtype=torch.int32), name, 0.125)  # fmt: skip
    steps = torch.cat([
        tq_core.attention(q[i : i + 1], cache, table, torch.tensor([seq_len - q_len + i + 1], dtype=torch.int32),
                          one, name, 0.125)
        for i in range(q_len)
    ])  # fmt: skip
    if q_len <= ROW_BY_ROW:
        assert torch.equal(verify, steps)
    else:
        torch.testing.assert_close(verify.float(), steps.float(), rtol=0, atol=2**-7)
