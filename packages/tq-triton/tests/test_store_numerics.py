"""tq_triton.store of NaN / ±inf / huge tokens: the same bytes as tq_core.store.

The rule (docs/overview.md, "Non-finite inputs"): a value token holding a NaN or ±inf,
and a Lloyd-Max key whose float32 sum of squares is not finite, are stored as the zero
vector (key codes 0); fp8 keys map NaN to 0 and saturate ±inf at ±448; finite values
(also beyond 65504 in bf16 / float32 input) are kept and the stored fields saturate. The
inputs are multiples of 1/4 plus the non-finite and huge elements, so every sum of
squares is exact or saturates the fp16 norm: the two stores agree bit for bit, without the
rounding-boundary allowance of test_store.py.
"""

from __future__ import annotations

import pytest
import torch

import tq_core
import tq_triton

NAN, INF = float("nan"), float("inf")


def tokens(gen: torch.Generator, n: int, h: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randint(-8, 9, (n, h, d), generator=gen).float() / 4
    x[0, :, 0] = NAN
    x[1, :, 1] = INF
    x[2, :, 2] = -INF
    x[3, 0, :3] = torch.tensor([NAN, INF, -INF])
    x[4] = NAN  # a whole token of NaN
    x[5] = -INF  # a whole token of -inf (value range 0: scale 0)
    pick = torch.rand(x.shape, generator=gen)
    x[pick < 0.03] = NAN
    x[(pick >= 0.03) & (pick < 0.05)] = INF
    x[(pick >= 0.05) & (pick < 0.07)] = -INF
    if dtype != torch.float16:
        # finite beyond fp16's range: kept by the rule, then the fields saturate
        x[6, :, 4] = 1e6
        x[7, 1, 5:9] = -3e5
        # finite, but the float32 sum of squares overflows: a Lloyd-Max key stored as zero
        x[8, 0] = 1e20
    return x.to(dtype)


@pytest.mark.parametrize("preset", list(tq_core.PRESETS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_non_finite_tokens_store_the_same_bytes_as_tq_core(preset, dtype, gen, device):
    n, h, d, bs = 12, 2, 64, 16
    k = tokens(gen, n, h, d, dtype)
    v = tokens(gen, n, h, d, dtype)
    slot = tq_core.get_preset(preset).layout(d).slot_size_aligned
    cache = torch.randint(0, 256, (2, bs, h, slot), generator=gen, dtype=torch.uint8)
    slots = torch.randperm(2 * bs, generator=gen)[:n]
    slots[9] = -1  # padding is still skipped
    ref = cache.clone()
    tq_core.store(k, v, ref, slots, preset)
    got = cache.to(device)
    tq_triton.store(k.to(device), v.to(device), got, slots.to(device), preset)
    got = got.cpu()
    assert torch.equal(got, ref), f"{int((got != ref).sum())} cache bytes differ from tq_core.store"
    # the rule itself, independently of tq_core's store: every written slot decodes finite,
    # and a replaced token decodes to exactly 0
    kd, vd = tq_core.gather_kv(got, torch.arange(2), 2 * bs, preset, d)  # position = slot here
    keep = slots >= 0
    written = slots[keep]
    assert torch.isfinite(kd[written]).all() and torch.isfinite(vd[written]).all()
    bad_v = ~torch.isfinite(v.float()).all(-1)[keep]
    assert bool(bad_v.any()) and (vd[written][bad_v] == 0).all()
    if not tq_core.get_preset(preset).key_is_fp8:
        bad_k = ~torch.isfinite((k.float() ** 2).sum(-1))[keep]
        assert bool(bad_k.any()) and (kd[written][bad_k] == 0).all()


@pytest.mark.parametrize("preset", list(tq_core.PRESETS))
@pytest.mark.parametrize("bad", [NAN, INF, -INF], ids=["nan", "posinf", "neginf"])
def test_one_kind_of_non_finite_element_alone(preset, bad, gen, device):
    # a single NaN, +inf or -inf in an otherwise finite batch (one program per head): each
    # kind alone must be caught, in keys and in values
    n, h, d, bs = 10, 2, 64, 16
    k = torch.randint(-8, 9, (n, h, d), generator=gen).float() / 4
    v = torch.randint(-8, 9, (n, h, d), generator=gen).float() / 4
    k[3, 1, 5] = bad
    v[6, 0, 9] = bad
    slot = tq_core.get_preset(preset).layout(d).slot_size_aligned
    cache = torch.randint(0, 256, (1, bs, h, slot), generator=gen, dtype=torch.uint8)
    slots = torch.randperm(bs, generator=gen)[:n]
    ref = cache.clone()
    tq_core.store(k, v, ref, slots, preset)
    got = cache.to(device)
    tq_triton.store(k.to(device), v.to(device), got, slots.to(device), preset)
    assert torch.equal(got.cpu(), ref), f"{int((got.cpu() != ref).sum())} cache bytes differ from tq_core.store"
