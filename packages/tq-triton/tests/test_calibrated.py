"""tq's calibrated formats (tq_k4v3, tq_k4v4, tq_k6v5) on tq_triton: the store against
tq_core.store, attention against tq_core.attention, and the parts a kernel adds for them
(position 0's score and value offsets, the key gain in the query, the rotated values)."""

from __future__ import annotations

import pytest
import torch
from test_store import _differences_are_rounding_boundaries, caches
from tqt_canary import cache_canary, check_calibrated_hostile_batch
from tqt_helpers import ON_GPU, assert_close, make_batch, run_triton

import tq_core
import tq_triton
from tq_core import CALIBRATED_PRESETS, CalibrationError, PresetError
from tq_core.testing import random_calibration

NAMES = list(CALIBRATED_PRESETS)
N_TOKENS = 3001 if ON_GPU else 77


def _store_inputs(gen, n, heads, head_dim, device, dtype=torch.float32):
    cal = random_calibration(gen, heads, head_dim)
    # positions 0..4, a strided view on the device: about a fifth of the tokens sit at position 0
    pos = torch.randint(0, 5, (2 * n,), generator=gen)[::2]
    k = (torch.randn(n, heads, head_dim, generator=gen) * 3 + cal.offset("key", pos == 0)).to(device, dtype)
    v = (torch.randn(n, heads, head_dim, generator=gen) + cal.offset("value", pos == 0)).to(device, dtype)
    pos = torch.stack([pos, pos], 1).to(device).flatten()[::2]
    return cal.to(device), pos, k, v


@pytest.mark.parametrize("preset", NAMES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_store_matches_reference(preset, head_dim, dtype, gen, device):
    heads, n = 3, N_TOKENS
    cal, pos, k, v = _store_inputs(gen, n, heads, head_dim, device, dtype)
    assert pos.stride(0) == 2
    k[4, 1, 3] = float("nan")  # a non-finite row is stored as the zero vector, as in tq-core
    v[6, 2, 0] = float("inf")
    ref, got, nslots = caches(preset, head_dim, 16, heads, gen, device, n)
    slots = torch.randperm(nslots, generator=gen)[:n].to(device)
    slots[::7] = -1
    tq_core.store(k, v, ref, slots, preset, calibration=cal, positions=pos)
    tq_triton.store(k, v, got, slots, preset, calibration=cal, positions=pos)
    same = (ref == got).float().mean().item()
    assert same >= 0.999, f"only {same:.5f} of bytes identical"
    _differences_are_rounding_boundaries(ref, got, preset, head_dim, k, slots)


@pytest.mark.parametrize("preset", NAMES)
def test_store_reads_int32_positions_as_int64_ones(preset, gen, device):
    """Positions may be int32 or int64 (vLLM passes either): the same tokens at the same
    positions store the same bytes, padding slots included."""
    heads, n, head_dim = 2, 45, 64
    cal, pos, k, v = _store_inputs(gen, n, heads, head_dim, device)
    a, b, nslots = caches(preset, head_dim, 16, heads, gen, device, n)
    slots = torch.randperm(nslots, generator=gen)[:n].to(device)
    slots[::5] = -1
    tq_triton.store(k, v, a, slots, preset, calibration=cal, positions=pos)
    tq_triton.store(k, v, b, slots, preset, calibration=cal, positions=pos.to(torch.int32))
    assert torch.equal(a, b)


# every format, head_dim and a spread of GQA groups; two more rows on a GPU (the
# interpreter's time goes to the three)
ATTENTION_ROWS = [("tq_k4v3", 64, 3), ("tq_k4v4", 128, 4), ("tq_k6v5", 256, 1)]
if ON_GPU:
    ATTENTION_ROWS += [("tq_k6v5", 64, 8), ("tq_k4v3", 128, 1)]


@pytest.mark.parametrize(("preset", "head_dim", "group"), ATTENTION_ROWS)
def test_attention_matches_reference(preset, head_dim, group, gen, device):
    seq_lens, q_lens = ([1, 17, 300, 2049], [1, 1, 8, 16]) if ON_GPU else ([1, 17, 70, 129], [1, 1, 8, 5])
    b = make_batch(gen, preset, seq_lens, q_lens, head_dim=head_dim, num_kv_heads=2, group=group, device=device)
    assert_close(*run_triton(b))


@pytest.mark.parametrize(("head_dim", "group", "splits"), [(64, 2, 1), (128, 4, 7), (256, 1, 3)])
def test_symmetric_values_match_reference(head_dim, group, splits, gen, device, monkeypatch):
    """The portable kernel decodes tq_k4v4's symmetric values from their codes' bits
    (``INT_VALUES``; tq-core looks them up in the value table), with the same results."""
    monkeypatch.setenv("TQ_GLUON", "0")
    b = make_batch(
        gen, "tq_k4v4", [1, 17, 70, 129], [1, 1, 8, 5], head_dim=head_dim, num_kv_heads=2, group=group, device=device
    )
    assert_close(*run_triton(b, splits=splits))


@pytest.mark.parametrize("preset", NAMES)
@pytest.mark.parametrize("splits", [1, 7])
def test_attention_splits_and_edges(preset, splits, gen, device):
    """q_len == seq_len (position 0 in the query's own tile), one-token requests (only
    position 0), a q_len=0 request, and kv splits: each split's output is rotated back and
    offset before the merge, which stays a convex combination."""
    b = make_batch(
        gen, preset, [5, 3, 1, 40, 300], [5, 0, 1, 11, 3], head_dim=64, num_kv_heads=2, group=2, device=device
    )
    assert_close(*run_triton(b, splits=splits))


@pytest.mark.parametrize("preset", NAMES)
@pytest.mark.parametrize("splits", [1, 3])
def test_rows_at_negative_positions_are_zero(preset, splits, gen, device, monkeypatch):
    """q_len > seq_len, values not checked (TQ_DEBUG off): row ``i`` sits at position
    ``seq_len - q_len + i``; rows at negative positions see no key and are written as 0
    (``tq_triton.attention``'s docstring), with one kv split as with several, not the value
    offset. The other rows are tq_core's rows of a request that ends at the same position."""
    monkeypatch.setenv("TQ_DEBUG", "0")
    b = make_batch(gen, preset, [5, 30], [5, 3], head_dim=64, num_kv_heads=2, group=2, device=device)
    q, kv, bt, sl, qsl, _, scale = b.args()
    sl = sl.clone()
    sl[0] = 2  # request 0: 5 query rows over 2 keys, rows 0..2 at positions -3..-1
    out = torch.full_like(q, float("nan"))
    tq_triton.attention(q, kv, bt, sl, qsl, preset, scale, out, max_query_len=5, num_kv_splits=splits, **b.extra())
    assert torch.equal(out[:3], torch.zeros_like(out[:3]))
    qsl_ref = torch.tensor([0, 2, 5], dtype=qsl.dtype, device=device)
    ref = tq_core.attention(q[3:].float(), kv, bt, sl, qsl_ref, preset, scale, **b.extra())
    assert_close(out[3:], ref)


def test_first_position_terms_carry_weight(gen, device):
    """The batch's calibration moves position 0's score and value by amounts the tolerance
    sees: attending as if every position were coded against ``mu`` and ``nu`` gives an error
    far above it, so the tests above fail when the kernel drops either term."""
    b = make_batch(gen, "tq_k4v3", [40, 9], [1, 3], head_dim=64, num_kv_heads=2, group=2, device=device)
    c = b.calibration
    same = tq_core.LayerCalibration(
        c.key_offset, c.key_offset, c.key_gain, c.value_offset, c.value_offset, c.value_gain
    )
    wrong = tq_core.attention(b.query.float(), *b.args()[1:], calibration=same)
    with pytest.raises(AssertionError):
        assert_close(wrong, b.reference())


def test_calibration_is_required_and_checked(gen, device):
    b = make_batch(gen, "tq_k4v4", [9], [1], head_dim=64, num_kv_heads=2, group=2, device=device)
    with pytest.raises(PresetError, match="calibration"):
        tq_triton.attention(*b.args())
    with pytest.raises(PresetError, match="takes none"):
        other = make_batch(gen, "turboquant_k3v4_nc", [9], [1], head_dim=64, num_kv_heads=2, group=2, device=device)
        tq_triton.attention(*other.args(), calibration=b.calibration)
    k = torch.randn(2, 2, 64, device=device)
    _, got, _ = caches("tq_k4v4", 64, 16, 2, gen, device, 2)
    with pytest.raises(PresetError, match="positions"):
        tq_triton.store(k, k, got, torch.tensor([0, 1], device=device), "tq_k4v4", calibration=b.calibration)


@pytest.mark.parametrize("field", ["key_first_offset", "key_gain", "value_offset", "value_first_offset", "value_gain"])
def test_a_calibration_tensor_shrunk_after_construction_is_refused(field, gen, device):
    """Every tensor of the calibration is checked where store and attention take it (shapes
    on the host): one shrunk in place after construction raises CalibrationError before a
    kernel could read past it, and the cache is left as it was."""
    b = make_batch(gen, "tq_k4v3", [9], [1], head_dim=64, num_kv_heads=2, group=2, device=device)
    cal = b.calibration
    getattr(cal, field).resize_(1, 64)
    with pytest.raises(
        CalibrationError, match=rf"calibration {field}: shape \(1, 64\) differs from key_offset's \(2, 64\)"
    ):
        tq_triton.attention(*b.args(), calibration=cal)
    k = torch.randn(2, 2, 64, device=device)
    _, got, _ = caches("tq_k4v3", 64, 16, 2, gen, device, 2)
    before = got.clone()
    pos = torch.tensor([0, 1], device=device)
    with pytest.raises(CalibrationError, match=rf"calibration {field}: shape"):
        tq_triton.store(k, k, got, pos, "tq_k4v3", calibration=cal, positions=pos)
    assert torch.equal(got, before)


def test_calibration_tensors_that_require_grad_are_taken_as_their_values(gen, device):
    """As in tq-core: a calibration whose tensors require grad stores and attends exactly as
    the same values without grad."""
    b = make_batch(gen, "tq_k4v3", [9, 20], [1, 3], head_dim=64, num_kv_heads=2, group=2, device=device)
    plain = b.calibration
    grad = tq_core.LayerCalibration(
        **{f: getattr(plain, f).clone().requires_grad_() for f in plain.__dataclass_fields__}
    )
    outs = [tq_triton.attention(*b.args(), max_query_len=3, calibration=cal) for cal in (plain, grad)]
    assert not outs[1].requires_grad and torch.equal(outs[0], outs[1])
    k = torch.randn(2, 2, 64, device=device)
    pos = torch.tensor([0, 1], device=device)
    got, _, _ = caches("tq_k4v3", 64, 16, 2, gen, device, 2)
    stored = []
    for cal in (plain, grad):
        c = got.clone()
        tq_triton.store(k, k, c, pos, "tq_k4v3", calibration=cal, positions=pos)
        stored.append(c)
    assert torch.equal(*stored) and not torch.equal(stored[0], got)


@pytest.mark.parametrize("splits", [1, 3])
def test_hostile_metadata_stays_inside_the_tensors(splits, gen, device):
    """A calibrated batch with a block id far outside the cache, a seq_len past the block
    table and a query_start_loc past the rows: nothing outside the cache or ``out`` is read or
    written (canary bytes around both), and the valid request matches tq-core."""
    check_calibrated_hostile_batch(gen, "tq_k6v5", 64, 2, splits, device)


@pytest.mark.parametrize("splits", [1, 3])
def test_symmetric_values_hostile_metadata_stays_inside_the_tensors(splits, gen, device, monkeypatch):
    """The same hostile batch through the portable kernel with tq_k4v4 (symmetric values
    from their codes' bits)."""
    monkeypatch.setenv("TQ_GLUON", "0")
    check_calibrated_hostile_batch(gen, "tq_k4v4", 64, 2, splits, device)


def test_store_skips_hostile_slots_and_positions(gen, device):
    """Slots past the cache and negative ones are skipped; positions are read only for the
    tokens stored (a huge position counts as any non-zero one)."""
    heads, d, n = 2, 64, 9
    cal, pos, k, v = _store_inputs(gen, n, heads, d, device)
    pos = pos.clone()
    pos[1] = 2**31 - 1
    ref, got, nslots = caches("tq_k4v3", d, 16, heads, gen, device, n)
    slots = torch.tensor([0, 1, -1, nslots, 10**12, 5, -(10**12), 7, nslots - 1], device=device)
    c = cache_canary(got)
    tq_triton.store(k, v, c.view, slots, "tq_k4v3", calibration=cal, positions=pos)
    c.assert_outside_unchanged()
    keep = torch.tensor([0, 1, 5, 7, 8], device=device)
    tq_core.store(k[keep], v[keep], ref, slots[keep], "tq_k4v3", calibration=cal, positions=pos[keep])
    assert int((c.view != ref).sum()) <= 2 * n
