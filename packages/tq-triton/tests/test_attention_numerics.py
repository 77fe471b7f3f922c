"""Large and non-finite queries: tq_triton.attention is finite where tq_core is, equal to
it up to fp16 rounding within the query's headroom (any scale; queries x1e6), and a
non-finite query element makes exactly its own (row, q head) NaN."""

from __future__ import annotations

import math

import pytest
import torch
from tqt_helpers import TOL, make_batch

import tq_core
import tq_triton
from tq_core.paged import block_fields
from tq_core.testing import assert_attention_close, dense_attention

SEQ_LENS = [40, 9]
Q_LENS = [1, 2]
GROUP = 2
# every query row of request r is a multiple of its kv head's key at this position, which
# every row sees: that key's score then exceeds every other by far (|k|^2 against k . k')
DOMINANT = 0


def batch(gen, preset, device):
    return make_batch(
        gen, preset, SEQ_LENS, Q_LENS, head_dim=64, num_kv_heads=2, group=GROUP, block_size=16, device=device
    )


def dominated_query(b) -> torch.Tensor:
    """float32 query whose rows are the dequantized key at :data:`DOMINANT` of their request
    and kv head."""
    rows = []
    for r, q_len in enumerate(Q_LENS):
        key, _ = tq_core.gather_kv(b.kv_cache, b.block_table[r], SEQ_LENS[r], b.preset)
        row = key[DOMINANT].repeat_interleave(GROUP, dim=0)  # [Hq, D]
        rows.append(row.expand(q_len, -1, -1))
    return torch.cat(rows).to(b.query.device)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("case", ["query_x1e6", "scale_1e30"])
@pytest.mark.parametrize("preset", list(tq_core.PRESETS))
def test_large_query_or_scale_is_finite_and_matches_tq_core(preset, case, splits, gen, device):
    b = batch(gen, preset, device)
    q = dominated_query(b)
    scale = b.scale
    if case == "query_x1e6":
        q = q * 1e6  # far past fp16's range once scaled, still exact enough in bf16
    else:
        scale = 1e30
    query = q.to(torch.bfloat16)
    _, bt, sl, qsl = b.args()[1:5]
    ref = tq_core.attention(query.float(), b.kv_cache, bt, sl, qsl, b.preset, scale)
    assert bool(ref.isfinite().all()), "tq_core's result should be finite here"
    out = tq_triton.attention(query, b.kv_cache, bt, sl, qsl, b.preset, scale, num_kv_splits=splits)
    assert bool(out.isfinite().all()), "tq_triton gave non-finite values where tq_core is finite"
    assert_attention_close(out.float(), ref, tol=TOL, what=f"{case}, {splits} splits")


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
def test_non_finite_query_element_poisons_only_its_row(preset, bad, splits, gen, device):
    b = batch(gen, preset, device)
    row, head = 1, 3  # request 1's first row, the second kv head's second q head
    query = b.query.clone()
    query[row, head, 5] = bad
    _, bt, sl, qsl = b.args()[1:5]
    ref = tq_core.attention(b.query.float(), b.kv_cache, bt, sl, qsl, b.preset, b.scale)
    ref_bad = tq_core.attention(query.float(), b.kv_cache, bt, sl, qsl, b.preset, b.scale)
    out = tq_triton.attention(query, b.kv_cache, bt, sl, qsl, b.preset, b.scale, num_kv_splits=splits)
    assert bool(out[row, head].isnan().all()), "the non-finite query row should be NaN"
    assert bool(ref_bad[row, head].isnan().all()), "tq_core's rule: a non-finite query row is NaN"
    others = torch.ones(out.shape[:2], dtype=torch.bool, device=out.device)
    others[row, head] = False
    assert_attention_close(out[others].float(), ref[others], tol=TOL, what="the other rows")


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
def test_query_beyond_the_fp16_headroom_saturates_and_stays_a_weighted_mean(preset, splits, gen, device):
    # x1e12: far past 65504 * 2^8 once scaled, so tq_triton saturates the query (documented
    # in tq_triton.attention); the result must stay finite and, as any softmax attention,
    # a convex combination of the request's values
    b = batch(gen, preset, device)
    query = (dominated_query(b) * 1e12).to(torch.bfloat16)
    _, bt, sl, qsl = b.args()[1:5]
    out = tq_triton.attention(query, b.kv_cache, bt, sl, qsl, b.preset, b.scale, num_kv_splits=splits).float().cpu()
    assert bool(out.isfinite().all())
    starts = [0, *torch.tensor(Q_LENS).cumsum(0).tolist()]
    for r, seq_len in enumerate(SEQ_LENS):
        _, v = tq_core.gather_kv(b.kv_cache, b.block_table[r], seq_len, b.preset)
        v = v.float().cpu().repeat_interleave(GROUP, dim=1)  # [L, Hq, D]
        lo, hi = v.amin(0), v.amax(0)
        slack = 1e-2 * (hi - lo).abs().amax() + 1e-3
        rows = out[starts[r] : starts[r + 1]]
        assert bool(((rows >= lo - slack) & (rows <= hi + slack)).all()), f"request {r}: outside its values' range"


@pytest.mark.parametrize("scale", [1e-30, 0.02, 0.125, 1.0, 3.0, 1e30, 1e300])
def test_query_scaling_is_exact_and_keeps_the_headroom(scale):
    from tq_triton.attention.launch import QUERY_HEADROOM_LOG2, query_scaling

    q_mul, q_scale = query_scaling(scale)
    mant, exp = math.frexp(q_scale)
    assert mant == 0.5 and exp - 1 >= QUERY_HEADROOM_LOG2, "q_scale must be a power of two >= 2^8"
    assert q_mul * q_scale == scale * 1.4426950408889634  # exact: a power-of-two division
    if scale * 1.4426950408889634 <= 2.0 ** (126 - QUERY_HEADROOM_LOG2):
        assert q_mul <= 2.0**-QUERY_HEADROOM_LOG2, "the scaled query keeps 2^8 of headroom"


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
def test_scores_carry_no_systematic_rounding_bias(preset, gen, device):
    assert_scores_unbiased(preset, gen, device, 64)


def assert_scores_unbiased(preset, gen, device, dim):
    """The check of :func:`test_scores_carry_no_systematic_rounding_bias` at head_dim ``dim``
    (16 q heads per kv head), for whichever kernel the environment selects."""
    # Two keys per request; every row's query is c * (k1 - k0), so each term of the score
    # difference d = scale * q . (k1 - k0) has the same sign and the query's fp16 rounding
    # errors add up instead of cancelling: a cast that shrinks every element (round toward
    # zero) without compensation biases d by -3.5e-4 relative. d is read back from the
    # output, o = v0 + sigmoid(d) (v1 - v0), and its relative error averaged over 1024 rows,
    # where the other rounding errors average to below 1e-4 (both presets: -0.7e-4 and
    # -0.0e-4 with the compensation, -4.3e-4 and -3.7e-4 without).
    reqs, hk, group = 8, 8, 16
    b = make_batch(gen, preset, [2] * reqs, [1] * reqs, head_dim=dim, num_kv_heads=hk, group=group, device=device)
    _, bt, sl, qsl = b.args()[1:5]
    dk, v0, dv = [], [], []
    for r in range(reqs):
        k, v = tq_core.gather_kv(b.kv_cache, bt[r], 2, b.preset)
        k, v = k.double().cpu(), v.double().cpu()
        dk.append(k[1] - k[0])
        v0.append(v[0])
        dv.append(v[1] - v[0])
    dk, v0, dv = (torch.stack(t).repeat_interleave(group, dim=1) for t in (dk, v0, dv))  # [R, Hq, D]
    target = 1.0 + 2.0 * torch.rand(reqs, hk * group, generator=gen, dtype=torch.float64)
    c = target / (b.scale * (dk * dk).sum(-1))
    query = (c[..., None] * dk).float()
    d_true = b.scale * (query.double() * dk).sum(-1)
    out = tq_triton.attention(query.to(device), b.kv_cache, bt, sl, qsl, b.preset, b.scale).double().cpu()
    p1 = ((out - v0) * dv).sum(-1) / (dv * dv).sum(-1)
    d_est = torch.log(p1 / (1 - p1))
    rel = d_est / d_true - 1
    assert float(rel.abs().median()) < 2e-3, "the score differences should be near their exact values"
    # At head_dim 128 these queries (elements near 0.1) times q_mul lie near fp16's smallest
    # normal numbers, where rounding toward zero drops up to a whole subnormal step that the
    # compensation (made for relative rounding) does not cover: every kernel shares that
    # floor (H200: k8v4 -1.6e-4, k3v4_nc -1.2e-4, 3bit_nc -1.1e-4 for the portable, Gluon and
    # token-rows kernels alike; the query's rounding alone, in float64, -1.5e-4 for k8v4),
    # and without the compensation the mean is -4.3e-4 to -4.7e-4
    # (docs/perf/runs/2026-12-04-token-rows-formats)
    mean_bound = 1.5e-4 if dim <= 64 else 3e-4
    assert abs(float(rel.mean())) < mean_bound, f"mean relative error of the scores {float(rel.mean()):.2e}"


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("skip", ["0", "1"])
def test_minus_inf_query_element_over_keys_of_one_sign_is_nan(splits, skip, gen, device, monkeypatch):
    """-inf against a key element that is positive in every cached token makes every score
    of the row -inf. tq_core's softmax gives NaN there, and so must the kernel (the online
    softmax alone would write 0), also where the merge skips splits whose log-sum-exp is
    -inf (``skip_empty``)."""
    monkeypatch.setenv("TQ_SKIP_EMPTY", skip)
    b = batch(gen, "turboquant_k8v4", device)
    dim = 5
    key = b.key.clone()
    key[:, :, dim] = key[:, :, dim].abs() + 0.5  # fp8 keys: stored as they are, all positive
    tq_core.store(key.to(b.kv_cache.device), b.value.to(b.kv_cache.device), b.kv_cache, b.slot_mapping, b.preset)
    row, head = 1, 3
    query = b.query.clone()
    query[row, head, dim] = float("-inf")
    _, bt, sl, qsl = b.args()[1:5]
    ref_bad = tq_core.attention(query.float(), b.kv_cache, bt, sl, qsl, b.preset, b.scale)
    assert bool(ref_bad[row, head].isnan().all()), "tq_core's rule: a non-finite query row is NaN"
    out = tq_triton.attention(query, b.kv_cache, bt, sl, qsl, b.preset, b.scale, num_kv_splits=splits)
    assert bool(out[row, head].isnan().all()), "the non-finite query row should be NaN"
    ref = tq_core.attention(b.query.float(), b.kv_cache, bt, sl, qsl, b.preset, b.scale)
    others = torch.ones(out.shape[:2], dtype=torch.bool, device=out.device)
    others[row, head] = False
    assert_attention_close(out[others].float(), ref[others], tol=TOL, what="the other rows")


# ------------------------------------------------------------------ issue 29: overflow and NaN


def dominant_constant_key(b):
    """``b`` with the key at :data:`DOMINANT` of every request and kv head stored as 1.5 in
    every element: against a constant query its score is several times any other key's, and
    with 1e37 per query element tq_core's float32 scores stay finite."""
    key = b.key.clone()
    starts = [0, *torch.tensor(SEQ_LENS).cumsum(0).tolist()[:-1]]
    for t0 in starts:
        key[t0 + DOMINANT] = 1.5
    dev = b.kv_cache.device
    tq_core.store(key.to(dev), b.value.to(dev), b.kv_cache, b.slot_mapping, b.preset)
    return b


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
def test_query_of_1e37_per_element_does_not_overflow_the_rotation(preset, splits, gen, device):
    """Every element 1e37 (finite in float32), head_dim 64, scale 1/8: the unnormalised
    rotation summed 64 such elements to inf before it scaled them (NaN output). Scaled
    first, the rotated query is one element that saturates in the fp16 product; its
    direction is kept, so the result is float64 attention's over the decoded cache. Each
    request's key at :data:`DOMINANT` is a constant vector, so that its score exceeds the
    others' by far (no near tie for fp16 rounding to break)."""
    b = dominant_constant_key(batch(gen, preset, device))
    query = torch.full(b.query.shape, 1e37, dtype=torch.float32, device=device)
    _, bt, sl, qsl = b.args()[1:5]
    out = tq_triton.attention(query, b.kv_cache, bt, sl, qsl, b.preset, 0.125, num_kv_splits=splits)
    assert bool(out.isfinite().all()), "tq_triton gave non-finite values for a finite query"
    k, v = b.decoded_kv()
    want = dense_attention(query, k, v, SEQ_LENS, Q_LENS, 0.125)
    assert_attention_close(out.float().cpu(), want.float(), tol=TOL, what=f"query 1e37, {splits} splits")


@pytest.mark.parametrize("field", ["norm", "scale"])
@pytest.mark.parametrize("skip", ["0", "1"])
def test_nan_bytes_in_a_used_cache_slot_give_nan(field, skip, gen, device, monkeypatch):
    """0xFFFF (an fp16 NaN) as the key norm or value scale of a position that request 0's
    row attends to: that row is NaN for both q heads of the kv head, never a plausible
    number, also where the merge skips splits it takes for empty (``skip_empty``: a NaN
    sum failed ``l > 0`` and the split was dropped). Request 1 is untouched."""
    monkeypatch.setenv("TQ_SKIP_EMPTY", skip)
    b = batch(gen, "turboquant_k3v4_nc", device)
    _, bt, sl, qsl = b.args()[1:5]
    clean = tq_triton.attention(b.query, b.kv_cache, bt, sl, qsl, b.preset, b.scale, num_kv_splits=3)
    pos, kv_head = 5, 1  # in request 0's first split; its one query row (position 39) sees it
    lay = b.preset.block_layout(64, b.kv_cache.shape[1], b.kv_cache.shape[2])
    view = getattr(block_fields(b.kv_cache, lay), field)
    view[int(bt[0, pos // 16]), kv_head, pos % 16] = 0xFF
    out = tq_triton.attention(b.query, b.kv_cache, bt, sl, qsl, b.preset, b.scale, num_kv_splits=3)
    heads = slice(kv_head * GROUP, (kv_head + 1) * GROUP)
    assert bool(out[0, heads].isnan().all()), f"a NaN {field} read by the row must make it NaN"
    assert torch.equal(out[1:], clean[1:]), "request 1 does not read the slot"
    assert torch.equal(out[0, : kv_head * GROUP], clean[0, : kv_head * GROUP]), "the other kv head is untouched"


def test_public_codebook_tensors_are_copies(gen, device):
    """Writing into what ``device_tensors.codebook`` / ``lut_table`` return must not change
    later results (they handed out the tensors the kernels read)."""
    from tq_triton import device_tensors

    b = batch(gen, "turboquant_k3v4_nc", device)
    before = tq_triton.attention(*b.args())
    for t in device_tensors.codebook(b.preset, 64, device):
        t.fill_(0.5)
    device_tensors.lut_table(b.preset, 64, device).fill_(0)
    after = tq_triton.attention(*b.args())
    assert torch.equal(before, after)
