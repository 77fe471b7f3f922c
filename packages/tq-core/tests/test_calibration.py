"""tq's calibrated formats (tq_k4v3, tq_k4v4): the calibration's statistics, the codec
against vLLM's Lloyd-Max key code, the paged path, attention, and the file."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from tqc_helpers import randn

import tq_core
from tq_core import CALIBRATED_PRESETS, Calibration, CalibrationError, CalibrationStats, LayerCalibration
from tq_core.calibration import state_bytes_per_layer
from tq_core.testing.batch import block_tables
from tq_core.testing.reference import dense_attention

CAL_NAMES = tuple(CALIBRATED_PRESETS)


def layer_cal(gen: torch.Generator, hk: int, d: int, *, identity: bool = False) -> LayerCalibration:
    """A layer calibration with random offsets and gains in [0.25, 4] (fp16-exact), or the identity."""

    def vec(scale: float) -> torch.Tensor:
        return randn(gen, hk, d, scale=scale).half().float()

    def gain() -> torch.Tensor:
        return (4.0 ** (2 * torch.rand(hk, d, generator=gen) - 1)).half().float()

    if identity:
        z, one = torch.zeros(hk, d), torch.ones(hk, d)
        return LayerCalibration(z, z, one, z, z, one)
    return LayerCalibration(vec(3.0), vec(3.0), gain(), vec(1.0), vec(1.0), gain())


def positions_of(seq_lens: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(s) for s in seq_lens]).to(torch.int32)


def test_presets_bytes_and_kinds():
    """Spelled out: keys 4-bit Lloyd-Max + fp16 norm; values Lloyd-Max (symmetric for tq_k4v4)
    + fp16 scale, no zero point."""
    kinds = {"tq_k4v3": (4, 3, "lloyd_max"), "tq_k4v4": (4, 4, "symmetric"), "tq_k6v5": (6, 5, "lloyd_max")}
    for name, (kb, vb, kind) in kinds.items():
        p = tq_core.get_preset(name)
        assert p.calibrated and p.value_kind == kind and p.key_bits == kb and p.value_bits == vb
        assert not p.value_is_uniform
        for d in (64, 128, 256, 512):
            lay = p.layout(d)
            assert lay.zero_offset is None
            assert lay.slot_size == d * kb // 8 + 2 + d * vb // 8 + 2
    assert (
        tq_core.get_preset("tq_k4v3").layout(64).slot_size_aligned
        < tq_core.get_preset("turboquant_k3v4_nc").layout(64).slot_size_aligned
    )
    assert "tq_k4v3" not in tq_core.PRESETS  # the backends' contract lists vLLM's four only
    for name in CAL_NAMES:
        lay = tq_core.get_preset(name).block_layout(64, 16, 2)
        assert lay.zero_offset is None and lay.used_bytes <= lay.block_bytes // 2


def test_statistics_against_numpy(gen):
    """Offsets are the means past / at position 0; gains are (E[q^2] / Var[x]) ** (1/4), scaled
    so the coded vector keeps the variance; value gains use the output projection's columns."""
    b, hk, group, t, d = 3, 2, 3, 40, 8
    q = randn(gen, b, hk * group, t, d) * torch.linspace(0.2, 3.0, d)
    k = randn(gen, b, hk, t, d) * torch.linspace(2.0, 0.5, d) + 5.0
    v = randn(gen, b, hk, t, d) + torch.arange(d)
    w = randn(gen, 16, hk * group * d)
    stats = CalibrationStats()
    stats.add(0, q[:2], k[:2], v[:2])
    stats.add(0, q[2:], k[2:], v[2:])
    lay = stats.finish(1, [w]).layer(0)
    x = k.double()
    for h in range(hk):
        rest = x[:, h, 1:].reshape(-1, d)
        var = rest.var(0, unbiased=False)
        qq = q.double()[:, h * group : (h + 1) * group].reshape(-1, d).square().mean(0)
        var_r, qq_r = var + 1e-3 * var.mean(), qq + 1e-3 * qq.mean()
        gain = (qq_r / var_r) ** 0.25
        gain *= ((var_r.sum()) / (gain**2 * var_r).sum()).sqrt()
        torch.testing.assert_close(lay.key_offset[h].double(), rest.mean(0), rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(lay.key_first_offset[h].double(), x[:, h, 0].mean(0), rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(lay.key_gain[h].double(), gain, rtol=2e-3, atol=0)
        vrest = v.double()[:, h, 1:].reshape(-1, d)
        vvar = vrest.var(0, unbiased=False)
        g = w.double().view(16, hk, group, d)[:, h].square().sum((0, 1))
        vvar_r, g_r = vvar + 1e-3 * vvar.mean(), g + 1e-3 * g.mean()
        vgain = (g_r / vvar_r) ** 0.25
        vgain *= (vvar_r.sum() / (vgain**2 * vvar_r).sum()).sqrt()
        torch.testing.assert_close(lay.value_offset[h].double(), vrest.mean(0), rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(lay.value_gain[h].double(), vgain, rtol=2e-3, atol=0)
    for f in ("key_offset", "key_gain", "value_first_offset"):
        t_ = getattr(lay, f)
        assert torch.equal(t_, t_.half().float()), f"{f} is not fp16-exact"
    assert stats.finish(1, None).layer(0).value_gain.eq(1).all()


def test_identity_calibration_is_vllms_key_code(gen):
    """With zero offsets and unit gains, tq_k4v3 codes keys exactly as turboquant_4bit_nc does
    and values with the 3-bit Lloyd-Max code of turboquant_3bit_nc's keys; its norm fields
    hold the norm that those decoders compute (norm over the centroids' norm), within one
    fp16 rounding."""
    n, hk, d = 37, 2, 64
    key, value = randn(gen, n, hk, d), randn(gen, n, hk, d, scale=2.0)
    cal = layer_cal(gen, hk, d, identity=True)
    mine = tq_core.encode_fields(key, value, "tq_k4v3", cal, torch.zeros(n, dtype=torch.bool))
    ref_k = tq_core.encode_fields(key, key, "turboquant_4bit_nc")
    ref_v = tq_core.encode_fields(value, value, "turboquant_3bit_nc")
    assert torch.equal(mine.key_codes, ref_k.key_codes) and torch.equal(mine.value_codes, ref_v.key_codes)
    for x, codes, stored, ref in (
        (key, ref_k.key_codes, mine.key_norm, "turboquant_4bit_nc"),
        (value, ref_v.key_codes, mine.value_scale, "turboquant_3bit_nc"),
    ):
        cent, _ = tq_core.key_codebook(ref, d)
        bits = tq_core.get_preset(ref).key_bits
        cnorm = cent[tq_core.unpack_codes(codes, bits, d)].norm(dim=-1)
        torch.testing.assert_close(stored.float(), x.float().norm(dim=-1) / cnorm, rtol=2**-11, atol=0)
    assert mine.value_zero is None


def _sylvester(d: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h / math.sqrt(d)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_symmetric_values_against_numpy(gen, d):
    """tq_k4v4's values against a float64 NumPy reference written from format.md: ``y = H v``,
    ``s = fp16(16/15 max |y_i|)``, each code the nearest of the 16 levels ``s (2 i - 15) / 16``
    (an argmin, not the codec's floor); decoding is ``H`` of the level. Codes may differ
    only where ``y_i / s`` lies within 1e-5 of a cell edge (float32 rotation); rows of zeros
    and with a NaN or inf get scale 0 and code 0."""
    n, hk = 41, 2
    value = randn(gen, n, hk, d) * torch.exp(randn(gen, n, hk, 1))
    value[3, 1] = 0.0
    value[5, 0, 7] = float("nan")
    value[6, 1, 0] = float("inf")
    value[7, 0] = 1e-6 * randn(gen, d)  # s near fp16's smallest normal numbers
    cal = layer_cal(gen, hk, d, identity=True)
    fields = tq_core.encode_fields(value, value, "tq_k4v4", cal, torch.zeros(n, dtype=torch.bool))
    codes = tq_core.unpack_codes(fields.value_codes, 4, d).numpy()
    scale = fields.value_scale.numpy()

    v = value.double().numpy()
    finite = np.isfinite(v).all(-1)
    y = np.where(finite[..., None], v, 0.0) @ _sylvester(d).T
    s_ref = np.minimum(np.abs(y).max(-1) * 16 / 15, 65504).astype(np.float16)
    assert np.array_equal(scale, np.where(finite, s_ref, 0).astype(np.float16))
    assert (scale[3, 1], scale[5, 0], scale[6, 1]) == (0, 0, 0)
    assert not codes[3, 1].any() and not codes[5, 0].any() and not codes[6, 1].any()

    s = s_ref.astype(np.float64)[..., None]
    levels = (2 * np.arange(16) - 15) / 16
    live = finite & (s_ref > 0)
    u = np.divide(y, s, out=np.zeros_like(y), where=s > 0)
    want = np.abs(u[..., None] - levels).argmin(-1)
    edge = np.abs(u * 8 - np.round(u * 8)) < 8e-5
    differ = (codes != want) & live[..., None]
    assert not (differ & ~edge).any(), np.argwhere(differ & ~edge)[:5]
    assert np.abs(codes - want)[live].max() <= 1

    back = tq_core.decode_fields(fields, "tq_k4v4", d)[1].double().numpy()
    ref = (s * levels[codes]) @ _sylvester(d)
    np.testing.assert_allclose(back, ref, rtol=0, atol=1e-6 * max(1.0, np.abs(ref).max()))
    # every coordinate within half a cell (s / 16) of its level
    err = np.abs(y - s * levels[codes]) / np.where(s > 0, s, 1.0)
    assert err[live].max() <= (1 + 2**-10) / 16


@pytest.mark.parametrize("name", CAL_NAMES)
def test_offsets_are_exact_and_position_zero_has_its_own(name, gen):
    """A key or value equal to its offset codes as the zero vector and decodes exactly;
    position 0 is coded against the first-position offsets, through the paged cache."""
    hk, d, bs = 2, 64, 16
    cal = layer_cal(gen, hk, d)
    seq_lens = [20, 35]
    nb, table, slots = block_tables(gen, seq_lens, bs, spare_blocks=2, unused="garbage")
    pos = positions_of(seq_lens)
    first = (pos == 0)[:, None, None]
    key = torch.where(first, cal.key_first_offset, cal.key_offset).expand(len(pos), hk, d).clone()
    value = torch.where(first, cal.value_first_offset, cal.value_offset).expand(len(pos), hk, d).clone()
    slot = tq_core.get_preset(name).layout(d).slot_size_aligned
    cache = torch.randint(0, 256, (nb, bs, hk, slot), generator=gen, dtype=torch.uint8)
    tq_core.store(key, value, cache, slots, name, calibration=cal, positions=pos)
    t0 = 0
    for r, s in enumerate(seq_lens):
        k, v = tq_core.gather_kv(cache, table[r], s, name, calibration=cal)
        assert torch.equal(k, key[t0 : t0 + s]) and torch.equal(v, value[t0 : t0 + s])
        coded_k, _ = tq_core.gather_kv(cache, table[r], s, name)
        assert coded_k.abs().max() == 0  # no calibration: the coded vectors, all zero here
        t0 += s


@pytest.mark.parametrize("name", CAL_NAMES)
def test_error_is_the_code_error_of_the_coded_vector(name, gen):
    """Decoded keys / values differ from the originals by the Lloyd-Max error of the coded
    vector ``gain * (x - offset)``, mapped back: a large shared offset costs nothing, where
    vLLM's preset of the same key bits loses precision to it."""
    n, hk, d = 400, 2, 64
    cal = layer_cal(gen, hk, d)
    pos = torch.arange(n) % 50
    first = (pos == 0)[:, None, None]
    noise_k, noise_v = randn(gen, n, hk, d, scale=0.3), randn(gen, n, hk, d, scale=0.3)
    key = torch.where(first, cal.key_first_offset, cal.key_offset) + noise_k / cal.key_gain
    value = torch.where(first, cal.value_first_offset, cal.value_offset) + noise_v / cal.value_gain
    slots = tq_core.encode_kv(key, value, name, cal, pos)
    k, v = tq_core.decode_kv(slots, name, d, cal, pos)
    p = tq_core.get_preset(name)
    # the unit-vector distortion of the codebooks (Gaussian source), times |coded|^2
    cases = ((k, key, noise_k, p.key_bits, cal.key_gain), (v, value, noise_v, p.value_bits, cal.value_gain))
    for got, want, noise, bits, gain in cases:
        err = ((got - want) * gain).square().sum() / noise.square().sum()
        expect = tq_core.get_codebook(bits, "gaussian").distortion
        assert 0.6 * expect < err < 1.4 * expect, (bits, float(err), expect)
    base = tq_core.decode_kv(tq_core.encode_kv(key, value, "turboquant_4bit_nc"), "turboquant_4bit_nc", d)[0]
    assert (base - key).square().sum() > 10 * (k - key).square().sum()


@pytest.mark.parametrize("name", CAL_NAMES)
@pytest.mark.parametrize("d", [64, 128])
def test_attention_over_calibrated_cache(name, d, gen):
    """Reference attention over a calibrated cache equals float64 softmax attention over the
    keys and values it decodes to (so a kernel may score q / gain against the coded keys),
    and is close to attention over the original keys and values."""
    hk, group, bs = 2, 3, 16
    seq_lens, q_lens = [1, 17, 40], [1, 5, 3]
    cal = layer_cal(gen, hk, d)
    nb, table, slots = block_tables(gen, seq_lens, bs, spare_blocks=2, unused="garbage")
    pos = positions_of(seq_lens)
    first = (pos == 0)[:, None, None]
    key = torch.where(first, cal.key_first_offset, cal.key_offset) + randn(gen, len(pos), hk, d) / cal.key_gain
    value = torch.where(first, cal.value_first_offset, cal.value_offset) + randn(gen, len(pos), hk, d) / cal.value_gain
    query = randn(gen, sum(q_lens), hk * group, d)
    slot = tq_core.get_preset(name).layout(d).slot_size_aligned
    cache = torch.randint(0, 256, (nb, bs, hk, slot), generator=gen, dtype=torch.uint8)
    tq_core.store(key, value, cache, slots, name, calibration=cal, positions=pos)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    scale = d**-0.5
    out = tq_core.attention(query, cache, table, sl, qsl, name, scale, calibration=cal)
    dec = [tq_core.gather_kv(cache, table[r], s, name, calibration=cal) for r, s in enumerate(seq_lens)]
    k_hat, v_hat = torch.cat([x[0] for x in dec]), torch.cat([x[1] for x in dec])
    torch.testing.assert_close(
        out.double(), dense_attention(query, k_hat, v_hat, seq_lens, q_lens, scale), rtol=1e-5, atol=1e-5
    )
    exact = dense_attention(query, key, value, seq_lens, q_lens, scale)
    rel = (out.double() - exact).norm() / exact.norm()
    # the value code's relative error is sqrt(distortion): 0.19 at 3 bits, 0.10 at 4 (measured 0.09-0.16)
    bound = 1.7 * math.sqrt(tq_core.get_codebook(tq_core.get_preset(name).value_bits, "gaussian").distortion)
    assert rel < bound, (float(rel), bound)


def test_store_and_attention_arguments(gen):
    hk, d = 2, 64
    cal = layer_cal(gen, hk, d)
    key = value = torch.zeros(3, hk, d)
    cache = torch.zeros(2, 16, hk, tq_core.get_preset("tq_k4v3").layout(d).slot_size_aligned, dtype=torch.uint8)
    slots = torch.tensor([0, 1, 2])
    pos = torch.tensor([0, 1, 2])
    with pytest.raises(tq_core.PresetError, match="calibrated format: pass calibration"):
        tq_core.store(key, value, cache, slots, "tq_k4v3")
    with pytest.raises(tq_core.PresetError, match="pass positions"):
        tq_core.store(key, value, cache, slots, "tq_k4v3", calibration=cal)
    with pytest.raises(tq_core.ShapeError, match="positions"):
        tq_core.store(key, value, cache, slots, "tq_k4v3", calibration=cal, positions=pos[:2])
    with pytest.raises(tq_core.RangeError, match="negative"):
        tq_core.store(key, value, cache, slots, "tq_k4v3", calibration=cal, positions=pos - 1)
    with pytest.raises(tq_core.ShapeError, match="made for 3 kv heads of head_dim 64, the cache has 2"):
        tq_core.store(key, value, cache, slots, "tq_k4v3", calibration=layer_cal(gen, 3, d), positions=pos)
    with pytest.raises(tq_core.PresetError, match="not a calibrated format"):
        vcache = torch.zeros(2, 16, hk, tq_core.get_preset("turboquant_k3v4_nc").layout(d).slot_size_aligned)
        tq_core.store(key, value, vcache.to(torch.uint8), slots, "turboquant_k3v4_nc", calibration=cal)
    q = torch.zeros(1, 4, d)
    one = torch.ones(1, dtype=torch.int32)
    with pytest.raises(tq_core.PresetError, match="calibrated format"):
        tq_core.attention(q, cache, torch.zeros(1, 1, dtype=torch.int32), one, torch.tensor([0, 1]), "tq_k4v3", 0.1)
    with pytest.raises(tq_core.PresetError, match="LayerCalibration"):
        tq_core.attention(
            q, cache, torch.zeros(1, 1, dtype=torch.int32), one, torch.tensor([0, 1]), "tq_k4v3", 0.1, calibration={}
        )


def test_layer_calibration_rejects_bad_tensors():
    z, one = torch.zeros(2, 8), torch.ones(2, 8)
    with pytest.raises(CalibrationError, match="NaN"):
        LayerCalibration(z, z, one, z + math.nan, z, one)
    with pytest.raises(CalibrationError, match="positive"):
        LayerCalibration(z, z, one, z, z, -one)
    with pytest.raises(CalibrationError, match="float32"):
        LayerCalibration(z.double(), z, one, z, z, one)
    with pytest.raises(CalibrationError, match="shape"):
        LayerCalibration(z, z, one, z, torch.zeros(3, 8), one)
    with pytest.raises(CalibrationError, match="no tokens"):
        CalibrationStats().finish(2)


def test_file_round_trip_and_errors(gen, tmp_path):
    cal = Calibration(tuple(layer_cal(gen, 2, 64) for _ in range(3)), {"model": "m", "tokens": 10})
    path = tmp_path / "cal.pt"
    cal.save(path)
    back = Calibration.load(path)
    assert back.meta == cal.meta and back.num_layers == 3
    for a, b in zip(cal.layers, back.layers, strict=True):
        assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("key_offset", "key_gain", "value_first_offset"))
    assert cal.state_bytes() == 3 * state_bytes_per_layer(2, 64) == 3 * 6 * 2 * 2 * 64
    back.check_model(3, 2, 64)
    with pytest.raises(CalibrationError, match="made for 3 layers x 2 kv heads x head_dim 64"):
        back.check_model(30, 3, 64)
    with pytest.raises(CalibrationError, match="does not exist"):
        Calibration.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a file")
    with pytest.raises(CalibrationError, match="not a tq calibration file"):
        Calibration.load(tmp_path / "junk.pt")
    torch.save({"format": "tq-calibration", "version": 99, "layers": []}, tmp_path / "v99.pt")
    with pytest.raises(CalibrationError, match="version 99"):
        Calibration.load(tmp_path / "v99.pt")
    with pytest.raises(CalibrationError, match=r"layers 0\.\.2"):
        back.layer(3)


def _calibrated_call_args(gen, name: str, hk: int, d: int):
    """A small valid store and attention call of ``name``: key, value, cache, slots,
    positions, query, block table, seq_lens, query_start_loc."""
    key, value = randn(gen, 3, hk, d), randn(gen, 3, hk, d)
    cache = torch.zeros(2, 16, hk, tq_core.get_preset(name).layout(d).slot_size_aligned, dtype=torch.uint8)
    slots = pos = torch.tensor([0, 1, 2])
    query = randn(gen, 1, 2 * hk, d)
    meta = (torch.zeros(1, 2, dtype=torch.int32), torch.tensor([3], dtype=torch.int32), torch.tensor([0, 1]))
    return key, value, cache, slots, pos, query, meta


@pytest.mark.parametrize("field", ["key_first_offset", "key_gain", "value_offset", "value_first_offset", "value_gain"])
@pytest.mark.parametrize("shape", [(1, 64), (2, 32)])
def test_a_tensor_shrunk_after_construction_is_refused_where_the_calibration_is_taken(gen, field, shape):
    """The calibration is checked where a call takes it (shapes, dtypes and devices of all six
    tensors, on the host): one tensor shrunk in place after construction raises
    CalibrationError in store, encode_kv, decode_kv and attention, not a broadcast."""
    hk, d, name = 2, 64, "tq_k4v3"
    cal = layer_cal(gen, hk, d)
    key, value, cache, slots, pos, query, meta = _calibrated_call_args(gen, name, hk, d)
    getattr(cal, field).resize_(shape)
    match = rf"{field}: shape \({shape[0]}, {shape[1]}\)"
    with pytest.raises(CalibrationError, match=match):
        tq_core.store(key, value, cache, slots, name, calibration=cal, positions=pos)
    with pytest.raises(CalibrationError, match=match):
        tq_core.encode_kv(key, value, name, cal, pos)
    slots_ = tq_core.encode_kv(key, value, name, layer_cal(gen, hk, d), pos)
    with pytest.raises(CalibrationError, match=match):
        tq_core.decode_kv(slots_, name, d, cal, pos)
    with pytest.raises(CalibrationError, match=match):
        tq_core.attention(query, cache, *meta, name, d**-0.5, calibration=cal)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.to_sparse(),
        lambda t: t.to_sparse_csr(),
        lambda t: torch.empty_like(t, device="meta"),
        lambda t: t.half(),
        lambda t: t[0],
        lambda t: t.tolist(),
    ],
    ids=["sparse", "sparse_csr", "meta", "fp16", "1d", "list"],
)
@pytest.mark.parametrize("field", ["key_offset", "key_gain", "value_first_offset"])
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_layer_calibration_rejects_tensors_it_cannot_hold_with_calibration_error(make, field):
    """Any tensor but a dense float32 one with data, in any of the six places, raises
    CalibrationError naming the field (a sparse or meta tensor raised NotImplementedError or
    RuntimeError from the value checks)."""
    z, one = torch.zeros(2, 8), torch.ones(2, 8)
    args = {"key_offset": z, "key_first_offset": z, "key_gain": one}
    args |= {"value_offset": z, "value_first_offset": z, "value_gain": one}
    args[field] = make(args[field])
    with pytest.raises(CalibrationError, match=f"^{field}: expected a dense float32"):
        LayerCalibration(**args)


@pytest.mark.parametrize("name", CAL_NAMES)
def test_calibration_tensors_that_require_grad_are_taken_as_their_values(name, gen):
    """A calibration whose tensors require grad (a module's parameters, say) codes, decodes and
    attends exactly as the same values without grad, and nothing returned requires grad."""
    hk, d = 2, 64
    plain = layer_cal(gen, hk, d)
    grad = LayerCalibration(**{f: getattr(plain, f).clone().requires_grad_() for f in plain.__dataclass_fields__})
    key, value, cache, slots, pos, query, meta = _calibrated_call_args(gen, name, hk, d)
    got = {}
    for label, cal in (("plain", plain), ("grad", grad)):
        c = cache.clone()
        tq_core.store(key, value, c, slots, name, calibration=cal, positions=pos)
        enc = tq_core.encode_kv(key, value, name, cal, pos)
        dec = tq_core.decode_kv(enc, name, d, cal, pos)
        gathered = tq_core.gather_kv(c, torch.tensor([0, 1]), 3, name, calibration=cal)
        out = tq_core.attention(query, c, *meta, name, d**-0.5, calibration=cal)
        got[label] = (c, enc, *dec, *gathered, out)
    for a, b in zip(got["plain"], got["grad"], strict=True):
        assert not b.requires_grad
        assert torch.equal(a, b)


def _file_data(gen, hk: int = 2, d: int = 8, layers: int = 2) -> dict:
    """What Calibration.save writes, as a dict to alter."""
    cal = Calibration(tuple(layer_cal(gen, hk, d) for _ in range(layers)), {"model": "m"})
    names = LayerCalibration.__dataclass_fields__
    return {
        "format": "tq-calibration",
        "version": 1,
        "meta": dict(cal.meta),
        "layers": [{f: getattr(lay, f).half() for f in names} for lay in cal.layers],
    }


def _put(data: dict, field: str, t: torch.Tensor) -> dict:
    data["layers"][1][field] = t
    return data


_cyclic: list = []
_cyclic.append(_cyclic)

# (what is altered, how, the error's words after the file's name)
MALFORMED_FILES = [
    ("meta list", lambda g, x: x | {"meta": [1, 2, 3]}, "meta: expected a mapping"),
    ("meta str", lambda g, x: x | {"meta": "abc"}, "meta: expected a mapping"),
    ("meta int", lambda g, x: x | {"meta": 5}, "meta: expected a mapping"),
    ("meta key", lambda g, x: x | {"meta": {1: "a"}}, "meta: key 1 is not a str"),
    ("meta tensor", lambda g, x: x | {"meta": {"t": torch.zeros(2)}}, r"meta\['t'\]: Tensor is not a plain value"),
    ("meta cycle", lambda g, x: x | {"meta": {"c": _cyclic}}, "meta: nested deeper than"),
    ("layers int", lambda g, x: x | {"layers": 5}, "layers: expected a list of layers, got int"),
    ("layers empty", lambda g, x: x | {"layers": []}, "holds no layers"),
    ("layer keys", lambda g, x: x | {"layers": [{1: 2, "a": 3}]}, "layer 0 does not hold"),
    ("sparse", lambda g, x: _put(x, "key_gain", torch.ones(2, 8).to_sparse()), "layer 1 key_gain: expected a dense"),
    ("meta device", lambda g, x: _put(x, "value_offset", torch.empty(2, 8, device="meta")), "layer 1 value_offset"),
    ("int tensor", lambda g, x: _put(x, "value_offset", torch.zeros(2, 8, dtype=torch.int32)), "expected a float"),
    ("nan", lambda g, x: _put(x, "key_offset", torch.full((2, 8), math.nan)), "layer 1 key_offset: holds a NaN"),
    ("zero gain", lambda g, x: _put(x, "value_gain", torch.zeros(2, 8)), "layer 1 value_gain: every gain"),
    ("shape", lambda g, x: _put(x, "key_gain", torch.ones(3, 8)), r"layer 1 key_gain: shape \(3, 8\)"),
    ("layer shape", lambda g, x: x | {"layers": [x["layers"][0], _file_data(g, d=16)["layers"][0]]}, "layer 1: shape"),
]


@pytest.mark.parametrize(("alter", "match"), [c[1:] for c in MALFORMED_FILES], ids=[c[0] for c in MALFORMED_FILES])
def test_load_raises_calibration_error_naming_the_file(alter, match, gen, tmp_path):
    """Every file load cannot use raises CalibrationError that names the file and what is
    wrong in it (a malformed meta raised TypeError / ValueError, sparse or meta tensors
    NotImplementedError / RuntimeError, and NaN, zero gains and bad shapes did not name it)."""
    path = tmp_path / "bad.cal"
    torch.save(_file_data(gen), path)
    Calibration.load(path)  # the unaltered file loads
    torch.save(alter(gen, _file_data(gen)), path)
    with pytest.raises(CalibrationError, match=rf"^calibration {re.escape(repr(str(path)))}: .*{match}"):
        Calibration.load(path)


def _layer(**changed: torch.Tensor) -> LayerCalibration:
    z, one = torch.zeros(2, 8), torch.ones(2, 8)
    args = {"key_offset": z, "key_first_offset": z, "key_gain": one}
    args |= {"value_offset": z, "value_first_offset": z, "value_gain": one}
    return LayerCalibration(**(args | changed))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("key_offset", 65520.0, "beyond fp16's range"),  # rounds to inf in fp16
        ("value_first_offset", -1e6, "beyond fp16's range"),
        ("key_gain", 1e5, "beyond fp16's range"),
        ("value_gain", 2.0**-25, "positive in fp16"),  # rounds to 0 in fp16
        ("key_gain", 1e-9, "positive in fp16"),
    ],
)
def test_the_constructor_rejects_what_a_file_cannot_hold(field, value, match):
    """A calibration file holds fp16: the constructor refuses a value that fp16 rounds to an
    infinity, or a gain it rounds to 0 (save wrote them and load refused the file)."""
    t = torch.ones(2, 8)
    t[1, 3] = value
    with pytest.raises(CalibrationError, match=f"{field}: .*{match}"):
        _layer(**{field: t})


def test_what_the_constructor_accepts_save_writes_and_load_reads_back(tmp_path):
    """The rule's edges: offsets that fp16 rounds to ±65504 and gains it rounds to its
    smallest subnormal (2^-24) or largest number load back as those fp16 values; a meta of
    every plain kind loads back equal."""
    big, tiny = torch.full((2, 8), 65519.0), torch.full((2, 8), 2.0**-25 * 1.01)
    lay = _layer(key_offset=big, value_first_offset=-big, key_gain=tiny, value_gain=big)
    meta = {"s": "x", "i": 10**30, "f": math.inf, "b": True, "n": None, "nest": [1, (2.5, {"k": ["v"]})]}
    Calibration((lay, lay), meta).save(tmp_path / "edge.cal")
    back = Calibration.load(tmp_path / "edge.cal")
    assert back.meta == meta
    for f in LayerCalibration.__dataclass_fields__:
        assert torch.equal(getattr(back.layers[1], f), getattr(lay, f).half().float()), f
    assert back.layers[0].key_offset.max() == 65504 and back.layers[0].key_gain.min() == 2.0**-24


# what changes after construction, and the error's words after the file's name
CHANGED_AFTER_CONSTRUCTION = [
    ("meta path", lambda cal: cal.meta.__setitem__("path", Path("/x")), r"meta\['path'\]: \w*Path is not a plain"),
    ("meta int key", lambda cal: cal.meta.__setitem__(3, "x"), "meta: key 3 is not a str"),
    ("nan", lambda cal: cal.layers[1].key_offset.fill_(math.nan), "layer 1 key_offset: holds a NaN"),
    ("big", lambda cal: cal.layers[0].value_offset.fill_(1e5), "layer 0 value_offset: .*beyond fp16's range"),
    ("zero gain", lambda cal: cal.layers[1].value_gain.zero_(), "layer 1 value_gain: every gain"),
    ("resized", lambda cal: cal.layers[0].key_gain.resize_(1, 8), r"layer 0 key_gain: shape \(1, 8\)"),
    ("not a layer", lambda cal: cal.layers.append("x"), "layer 2: expected a LayerCalibration, got str"),
]


@pytest.mark.parametrize(
    ("change", "match"), [c[1:] for c in CHANGED_AFTER_CONSTRUCTION], ids=[c[0] for c in CHANGED_AFTER_CONSTRUCTION]
)
def test_save_refuses_what_load_cannot_read(change, match, gen, tmp_path):
    """A calibration changed after construction (its meta dict, its tensors in place) so that
    load would refuse the file: save raises CalibrationError naming the file, and writes
    nothing."""
    layers = [layer_cal(gen, 2, 8), layer_cal(gen, 2, 8)]  # a list, which "not a layer" appends to
    cal = Calibration(layers, {"model": "m"})
    path = tmp_path / "out.cal"
    change(cal)
    with pytest.raises(CalibrationError, match=rf"^calibration {re.escape(repr(str(path)))}: not written: .*{match}"):
        cal.save(path)
    assert not path.exists()


def _samples(gen: torch.Generator, b: int, hk: int, group: int, t: int, d: int, shift: float = 0.0):
    """Queries, keys and values whose channels differ in scale and offset (``shift`` moves
    the keys' and values' means), and an output projection."""
    q = randn(gen, b, hk * group, t, d) * torch.linspace(0.2, 3.0, d)
    k = randn(gen, b, hk, t, d) * torch.linspace(2.0, 0.5, d) + 5.0 + shift * torch.linspace(-1, 1, d)
    v = randn(gen, b, hk, t, d) * torch.linspace(0.5, 1.5, d) + torch.arange(d) * (1 + shift)
    w = randn(gen, 16, hk * group * d)
    return q, k, v, w


def test_add_first_counts_position_zero_only(gen):
    """add_first: its rows' position 0 joins the position-0 offsets (a mean over every
    sample of position 0), and nothing else changes: not the offsets past position 0, not
    the gains, not the token count."""
    b, hk, group, t, d = 3, 2, 3, 20, 8
    q, k, v, w = _samples(gen, b, hk, group, t, d)
    k1, v1 = randn(gen, 5, hk, 1, d) * 3 - 2, randn(gen, 5, hk, 1, d) + 7
    plain, more = CalibrationStats(), CalibrationStats()
    plain.add(0, q, k, v)
    more.add(0, q, k, v)
    more.add_first(0, k1, v1)
    a, c = plain.finish(1, [w]).layer(0), more.finish(1, [w]).layer(0)
    firsts_k = torch.cat([k[:, :, 0], k1[:, :, 0]]).double().mean(0)
    firsts_v = torch.cat([v[:, :, 0], v1[:, :, 0]]).double().mean(0)
    torch.testing.assert_close(c.key_first_offset.double(), firsts_k, rtol=1e-3, atol=2e-3)
    torch.testing.assert_close(c.value_first_offset.double(), firsts_v, rtol=1e-3, atol=2e-3)
    assert not torch.equal(a.key_first_offset, c.key_first_offset)
    for f in ("key_offset", "key_gain", "value_offset", "value_gain"):
        assert torch.equal(getattr(a, f), getattr(c, f)), f
    assert plain.tokens == more.tokens == b * t
    with pytest.raises(tq_core.ShapeError, match="do not form"):
        more.add_first(0, k1, v1[:, :1, :, :4])


def _score_error_by_samples(lay: LayerCalibration, q, k, v, w, group: int) -> dict[str, np.ndarray]:
    """expected_score_error computed from the samples themselves, in numpy, per kv head."""
    hk, d = lay.key_offset.shape
    cal = {f: getattr(lay, f).double().numpy() for f in ("key_offset", "key_first_offset", "key_gain")}
    cal |= {f: getattr(lay, f).double().numpy() for f in ("value_offset", "value_first_offset", "value_gain")}
    q, k, v = (x.double().numpy() for x in (q, k, v))
    g = np.square(w.double().numpy()).sum(0).reshape(hk, group, d).sum(1)
    out: dict[str, np.ndarray] = {p: np.zeros(hk) for p in ("key", "key_first", "value", "value_first")}
    for h in range(hk):
        qq = np.square(q[:, h * group : (h + 1) * group]).reshape(-1, d).mean(0)
        for part, x, sl, off, gain, signal in (
            ("key", k, slice(1, None), "key_offset", "key_gain", qq),
            ("key_first", k, slice(0, 1), "key_first_offset", "key_gain", qq),
            ("value", v, slice(1, None), "value_offset", "value_gain", g[h]),
            ("value_first", v, slice(0, 1), "value_first_offset", "value_gain", g[h]),
        ):
            coded = (x[:, h, sl].reshape(-1, d) - cal[off][h]) * cal[gain][h]
            out[part][h] = np.square(coded).sum(1).mean() * (signal / np.square(cal[gain][h])).sum()
    return out


def test_expected_score_error_against_samples(gen):
    """expected_score_error from the statistics' sums equals E||a (x - mu)||^2 * sum(signal / a^2)
    computed over the samples, for a calibration made elsewhere (random offsets and gains)."""
    b, hk, group, t, d = 4, 2, 3, 30, 8
    q, k, v, w = _samples(gen, b, hk, group, t, d)
    stats = CalibrationStats()
    stats.add(0, q, k, v)
    stats.add(1, q * 2, k - 1, v + 1)
    lays = [layer_cal(gen, hk, d), layer_cal(gen, hk, d)]
    got = tq_core.calibration.expected_score_error(Calibration(tuple(lays)), stats, [w, w])
    for i, (qi, ki, vi) in enumerate(((q, k, v), (q * 2, k - 1, v + 1))):
        want = _score_error_by_samples(lays[i], qi, ki, vi, w, group)
        for part, values in want.items():
            np.testing.assert_allclose(got[part][i].numpy(), values, rtol=1e-6, err_msg=f"layer {i} {part}")
    # without output weights the value signal is 1 per channel
    ones = tq_core.calibration.expected_score_error(Calibration((lays[0],)), _one_layer(q, k, v))
    want = _score_error_by_samples(lays[0], q, k, v, torch.ones(1, hk * group * d) / math.sqrt(group), group)
    np.testing.assert_allclose(ones["value"][0].numpy(), want["value"], rtol=1e-6)


def _one_layer(q, k, v) -> CalibrationStats:
    stats = CalibrationStats()
    stats.add(0, q, k, v)
    return stats


def test_held_out_report_is_one_on_the_calibration_text_and_more_elsewhere(gen):
    """A calibration's report on its own statistics reads 1 for every part; on statistics of
    other text (shifted means) it reads more than 1 for keys and values past position 0 (its
    offsets and gains are off the optimum, which a calibration on that text reaches within
    the regularisation), and the uncalibrated code reads far more than 1 for keys."""
    b, hk, group, t, d = 4, 2, 3, 40, 16
    q, k, v, w = _samples(gen, b, hk, group, t, d)
    q2, k2, v2, _ = _samples(gen, b, hk, group, t, d, shift=1.5)
    cal = _one_layer(q, k, v).finish(1, [w])
    same = tq_core.calibration.held_out_report(cal, _one_layer(q, k, v), [w])
    for part in tq_core.calibration.HELD_OUT_PARTS:
        assert same.ratio[part] == pytest.approx((1.0,), abs=1e-12), part
    other = tq_core.calibration.held_out_report(cal, _one_layer(q2, k2, v2), [w])
    assert other.ratio["key"][0] > 1.05 and other.ratio["value"][0] > 1.05
    assert other.uncalibrated["key"][0] > 2 * other.ratio["key"][0]
    assert other.tokens == b * t and other.worst("key") == (0, other.ratio["key"][0])
    lines = other.lines()
    assert len(lines) == 4 and lines[0].startswith("  keys ") and f"{other.ratio['key'][0]:.3f}x" in lines[0]
    # the minimum over gains (Cauchy-Schwarz) bounds every calibration's score error
    held = _one_layer(q2, k2, v2)
    m = held.moments(0)
    var = m["kk"] - m["k"] ** 2
    best = ((m["qq"] * var).sqrt().sum(-1)) ** 2
    for lay in (cal.layer(0), layer_cal(gen, hk, d), held.finish(1, [w]).layer(0)):
        err = tq_core.calibration.expected_score_error(Calibration((lay,)), held)["key"][0]
        assert (err >= best * (1 - 1e-9)).all()


def test_held_out_report_refuses_statistics_of_another_model(gen):
    q, k, v, w = _samples(gen, 2, 2, 3, 10, 8)
    cal = _one_layer(q, k, v).finish(1, [w])
    two = _one_layer(q, k, v)
    two.add(1, q, k, v)
    with pytest.raises(CalibrationError, match=r"hold layers \[0, 1\], the calibration has 1"):
        tq_core.calibration.expected_score_error(cal, two)
    q4, k4, v4, _ = _samples(gen, 2, 1, 3, 10, 8)
    with pytest.raises(tq_core.ShapeError, match=r"shape \(1, 8\), the calibration's \(2, 8\)"):
        tq_core.calibration.expected_score_error(cal, _one_layer(q4, k4, v4))


def test_the_identity_calibration_codes_vectors_as_they_are(tmp_path):
    # "none" (tq eval --calibration none, tq-vllm's "tq_calibration": "none"): offsets 0 and
    # gains 1, so coding and uncoding return every key and value unchanged, at position 0 too
    lay = LayerCalibration.identity(3, 64)
    gen = torch.Generator().manual_seed(5)
    k, v = randn(gen, 5, 3, 64, scale=7.0), randn(gen, 5, 3, 64) - 3
    first = torch.tensor([True, False, False, True, False])
    for f in (first, None):
        ck, cv = lay.code(k, v, f)
        assert torch.equal(ck, k) and torch.equal(cv, v)
        uk, uv = lay.uncode(ck, cv, f)
        assert torch.equal(uk, k) and torch.equal(uv, v)
    cal = Calibration.identity(4, 3, 64)
    cal.check_model(4, 3, 64)
    assert tq_core.NO_CALIBRATION == "none" and cal.meta["text"].startswith("none")
    cal.save(tmp_path / "id.cal")
    back = Calibration.load(tmp_path / "id.cal")
    assert all(
        torch.equal(a.key_gain, b.key_gain) and torch.equal(a.value_offset, b.value_offset)
        for a, b in zip(cal.layers, back.layers, strict=True)
    )
    for bad in ((0, 64), (3, 0), (3.0, 64), (True, 64)):
        with pytest.raises(tq_core.ShapeError, match="identity calibration"):
            LayerCalibration.identity(*bad)
    with pytest.raises(tq_core.ShapeError, match="identity calibration"):
        Calibration.identity(0, 3, 64)
