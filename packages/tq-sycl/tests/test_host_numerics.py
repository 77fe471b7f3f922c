"""Non-finite inputs in the host core vs tq_core.attention (docs/overview.md, "Non-finite inputs").

A query row with a NaN or ±inf element gives a NaN output row for that (row, q head) and
leaves every other row as it was; a cache stored from NaN / ±inf tokens (the store
replaces them: NaN -> 0, ±inf -> ±65504) gives finite output for finite queries.
"""

from __future__ import annotations

import pytest
import torch
from cases import make_case, prepared

import tq_core
import tq_sycl
from tq_core.paged import block_fields
from tq_core.testing import assert_attention_close, dense_attention
from tq_sycl import extensions

PRESETS = sorted(tq_core.PRESETS)
TOL = 2e-5  # as test_host_attention.py: float32 summation order and the rotated-domain dot
NAN, INF = float("nan"), float("inf")


def host(case, num_splits):
    return tq_sycl.attention(*case.args(), kernel="host", num_splits=num_splits)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_non_finite_query_element_gives_the_nan_row_tq_core_gives(gen, preset, num_splits, dtype):
    case = make_case(gen, preset, seq_lens=[21, 40], q_lens=[3, 2], num_kv_heads=2, group=4, dtype=dtype)
    bad = [(0, 1, NAN), (2, 4, INF), (3, 0, -INF), (4, 7, NAN), (4, 6, INF)]  # (row, q head, value)
    for row, head, x in bad:
        case.query[row, head, (7 * row + head) % case.query.shape[2]] = x
    hit = torch.zeros(case.query.shape[:2], dtype=torch.bool)
    for row, head, _ in bad:
        hit[row, head] = True
    ref = case.reference()
    got = host(case, num_splits)
    assert got.dtype == dtype
    assert torch.isnan(ref[hit]).all(), "tq_core: a poisoned (row, head) has a non-NaN element"
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), "NaN elements differ from tq_core's"
    assert torch.isfinite(got[~hit]).all()
    # every other row, also of q heads sharing the poisoned rows' kv head, as without the NaN
    tol = TOL if dtype == torch.float32 else 2 * torch.finfo(dtype).eps
    assert_attention_close(got[~hit], ref[~hit], tol=tol)


def poisoned_store(key, value, kv_cache, slot_mapping, preset):
    """tq_core.store of the tokens with NaN / ±inf written over some of their elements."""
    k, v = key.clone(), value.clone()
    n = k.shape[0]
    k[n // 2] = NAN
    v[n // 2, 0] = NAN
    v[n // 3, :, 1::4] = INF
    k[n // 4, 0, :5] = -INF
    k[n // 5, :, 3::7] = NAN
    v[n // 6, 1, 2] = -INF
    k[-1, 1, 0] = INF
    tq_core.store(k, v, kv_cache, slot_mapping, preset)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("num_splits", [1, 4])
def test_cache_stored_from_non_finite_tokens_gives_finite_output(gen, preset, num_splits):
    case = make_case(gen, preset, seq_lens=[19, 45, 8], q_lens=[4, 1, 8], num_kv_heads=2, group=2, store=poisoned_store)
    ref = case.reference()
    assert torch.isfinite(ref).all()
    got = host(case, num_splits)
    assert torch.isfinite(got).all()
    assert_attention_close(got, ref, tol=TOL)


# ------------------------------------------------------------------ issue 29: overflow and NaN


@pytest.mark.parametrize("scale", [1e300, 3.5e38, 1e-50])
def test_scale_outside_float32_is_a_range_error(gen, scale):
    # finite in float64, inf or 0 in the float32 the core computes in (it returned 0)
    q, kv, bt, sl, qsl, p, _ = make_case(gen, "turboquant_k3v4_nc", seq_lens=[5], q_lens=[1], head_dim=64).args()
    with pytest.raises(tq_core.RangeError, match="scale="):
        tq_sycl.attention(q, kv, bt, sl, qsl, p, scale, kernel="host")


def test_compiled_core_refuses_a_scale_that_is_not_finite_in_float32(gen):
    # the argument dict passed to the module directly, past tq_core's checks
    call = prepared(make_case(gen, "turboquant_k3v4_nc", seq_lens=[5], q_lens=[1], head_dim=64))
    call.args["scale"] = 1e300
    with pytest.raises(ValueError, match="scale must be positive and finite in float32"):
        extensions.host_module().attention(call.args)


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_query_of_1e37_per_element_does_not_overflow_the_rotation(gen, preset, num_splits):
    """Every element 1e37, head_dim 64, scale 1/8: the rotation summed 64 of them to inf
    before it scaled them (output 0). The key at position 0 of each request is a constant
    vector (1.5), so its score exceeds every other by far: float64 attention over the decoded
    cache is that key's value."""
    case = make_case(gen, preset, seq_lens=[30, 9], q_lens=[2, 1], head_dim=64, num_kv_heads=2, group=2)
    key = case.key.clone()
    key[0] = key[30] = 1.5  # the scores stay within float32 (1.5 * 64 * 1e37 / 8 * 1.44)
    tq_core.store(key, case.value, case.kv_cache, case.slot_mapping, case.preset)
    q, kv, bt, sl, qsl, p, _ = case.args()
    query = torch.full_like(q, 1e37)
    got = tq_sycl.attention(query, kv, bt, sl, qsl, p, 0.125, kernel="host", num_splits=num_splits)
    k, v = case.decoded_kv()
    want = dense_attention(query, k, v, case.seq_len_list, case.q_len_list, 0.125)
    assert torch.isfinite(got).all()
    assert_attention_close(got, want.float(), tol=TOL)


@pytest.mark.parametrize("field", ["norm", "scale"])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_nan_bytes_in_a_used_cache_slot_give_nan(gen, field, num_splits):
    """0xFFFF (an fp16 NaN) as the key norm or value scale of a position request 0's rows
    attend to: their rows of that kv head are NaN (std::max ignored the NaN score and the
    merge's l > 0 dropped the split: a plausible number came out). Request 1 is untouched."""
    case = make_case(gen, "turboquant_k3v4_nc", seq_lens=[40, 9], q_lens=[2, 1], head_dim=64, num_kv_heads=2, group=2)
    clean = host(case, num_splits)
    pos, kv_head = 5, 1
    lay = case.preset.block_layout(64, case.kv_cache.shape[1], 2)
    view = getattr(block_fields(case.kv_cache, lay), field)
    view[int(case.block_table[0, pos // 16]), kv_head, pos % 16] = 0xFF
    ref = case.reference()
    got = host(case, num_splits)
    heads = slice(kv_head * 2, kv_head * 2 + 2)
    assert torch.isnan(ref[:2, heads]).all(), "tq_core: rows reading a NaN are NaN"
    assert torch.isnan(got[:2, heads]).all(), f"a NaN {field} read by the rows must make them NaN"
    assert torch.equal(got[2:], clean[2:]) and torch.equal(got[:2, :2], clean[:2, :2])


def test_a_cache_of_zero_kv_heads_is_a_shape_error(gen):
    q, kv, bt, sl, qsl, p, scale = make_case(gen, "turboquant_k8v4", seq_lens=[5], q_lens=[1], head_dim=64).args()
    with pytest.raises(tq_core.ShapeError, match="kv_cache: has 0 kv heads"):
        tq_sycl.attention(q, kv[:, :, :0], bt, sl, qsl, p, scale, kernel="host")


@pytest.mark.parametrize("bad", [0, 257, True, 2.0])
def test_num_splits_errors_are_range_errors_naming_it(gen, bad):
    args = make_case(gen, "turboquant_k8v4", seq_lens=[5], q_lens=[1], head_dim=64).args()
    for kernel in ("host", "scalar"):
        with pytest.raises(tq_core.RangeError, match="num_splits="):
            tq_sycl.attention(*args, kernel=kernel, num_splits=bad)


def test_zero_query_heads_give_an_empty_result_as_tq_core(gen):
    q, kv, bt, sl, qsl, p, scale = make_case(gen, "turboquant_k3v4_nc", seq_lens=[5], q_lens=[2], head_dim=64).args()
    q0 = q[:, :0]
    want = tq_core.attention(q0, kv, bt, sl, qsl, p, scale)
    got = tq_sycl.attention(q0, kv, bt, sl, qsl, p, scale, kernel="host", num_splits=2)
    assert got.shape == want.shape == (2, 0, 64)


def test_prepared_centroids_are_a_copy(gen):
    # writing into what prepare() hands out changed every later call's result
    case = make_case(gen, "turboquant_k3v4_nc", seq_lens=[20], q_lens=[2], head_dim=64)
    before = host(case, 1)
    prepared(case).centroids.fill_(0.5)
    assert torch.equal(host(case, 1), before)
