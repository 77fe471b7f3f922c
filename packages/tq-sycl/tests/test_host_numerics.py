"""Non-finite inputs in the host core vs tq_core.attention (docs/overview.md, "Non-finite inputs").

A query row with a NaN or ±inf element gives a NaN output row for that (row, q head) and
leaves every other row as it was; a cache stored from NaN / ±inf tokens (the store
replaces them: NaN -> 0, ±inf -> ±65504) gives finite output for finite queries.
"""

from __future__ import annotations

import pytest
import torch
from cases import make_case

import tq_core
import tq_sycl
from tq_core.testing import assert_attention_close

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
