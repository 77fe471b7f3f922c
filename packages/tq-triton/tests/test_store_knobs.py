"""The store's launch parameters (``StoreConfig``) and both widths of its offsets against
tq_core.store, for every preset: vLLM's four and tq's calibrated formats.

``StoreConfig`` sets tiles, warps, the code search and a register cap, none of which changes
the arithmetic; the kernel adds offsets inside a program in 32 bits, or in 64 where a row
stride times ``block_t`` could overflow them (``store.wide_offsets``), the same arithmetic
either way. The tests force the 64-bit offsets on small tensors to run that code.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from test_store import _differences_are_rounding_boundaries, caches, fp16_fields_off, recoded_rows
from tqt_helpers import ON_GPU

import tq_core
import tq_triton
from tq_core import LayerCalibration, unpack_codes
from tq_core.hadamard import hadamard_matrix
from tq_core.testing import random_calibration
from tq_triton import TuningError, tuning
from tq_triton.tuning import StoreConfig

EVERY_PRESET = [*tq_core.PRESETS, *tq_core.CALIBRATED_PRESETS]
N_TOKENS = 3001 if ON_GPU else 77
ST = sys.modules["tq_triton.store"]
# name -> (launch parameters, 64-bit offsets forced): the defaults, and code search with a
# tile that leaves the call's last program partly empty, with 32- and 64-bit offsets
VARIANTS = {
    "t16": (StoreConfig(), False),
    "search-t32w8": (StoreConfig(code_search=1, block_t=32, num_warps=8), False),
    "search-t32w8-wide": (StoreConfig(code_search=1, block_t=32, num_warps=8), True),
}


def _store_variant(variant: str, monkeypatch, *args, **kwargs) -> None:
    """``tq_triton.store(*args, **kwargs)`` with the launch parameters of ``variant``, its
    offsets 64-bit where the variant forces them."""
    cfg, wide = VARIANTS[variant]
    if wide:
        monkeypatch.setattr(ST, "wide_offsets", lambda *_: True)
    tq_triton.store(*args, config=cfg, **kwargs)


def _extra(preset: str, gen: torch.Generator, n: int, heads: int, d: int, device, cal=None) -> dict:
    if not tq_core.get_preset(preset).calibrated:
        return {}
    pos = torch.randint(0, 3, (n,), generator=gen).to(device)
    return {"calibration": (cal or random_calibration(gen, heads, d)).to(device), "positions": pos}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("preset", EVERY_PRESET)
def test_variants_match_reference(preset, dtype, variant, gen, device, monkeypatch):
    """Byte-identical to tq_core.store except for codes on a rounding boundary (as
    test_store.py holds the default store), NaN and overflowing rows included."""
    heads, d, n = 3, 128, N_TOKENS
    k = (torch.randn(n, heads, d, generator=gen) * 3).to(device, dtype)
    v = torch.randn(n, heads, d, generator=gen).to(device, dtype)
    k[3, 1, 7] = float("nan")
    v[8, 1, 2] = float("inf")
    if dtype == torch.float32:
        k[5, 0] = 1e20  # finite, but its sum of squares overflows: stored as the zero vector
    extra = _extra(preset, gen, n, heads, d, device)
    ref, got, nslots = caches(preset, d, 16, heads, gen, device, n)
    slots = torch.randperm(nslots, generator=gen)[:n].to(device)
    slots[::7] = -1
    tq_core.store(k, v, ref, slots, preset, **extra)
    _store_variant(variant, monkeypatch, k, v, got, slots, preset, **extra)
    same = (ref == got).float().mean().item()
    assert same >= 0.999, f"only {same:.5f} of bytes identical"
    _differences_are_rounding_boundaries(ref, got, preset, d, k, slots)


def _exact_rows(gen: torch.Generator, n: int, heads: int, d: int, scaled: bool) -> torch.Tensor:
    """float32 rows of multiples of 2**-12 below 4 in magnitude (15 significant bits: every
    Hadamard sum exact in float32), and rows at the edges of the norm's range: all zero, one
    NaN, +-inf, an overflowing sum of squares and, with ``scaled``, rows multiplied by 2**-100
    (a sum of squares below float32's normals) and 2**40 (still exact)."""
    x = torch.randint(-(1 << 14), 1 << 14, (n, heads, d), generator=gen).float() / 4096
    x[0] = 0.0
    x[1, 0, 5] = float("nan")
    x[2, 1, 9] = float("inf")
    x[3, 0, 0] = -float("inf")
    x[4, 1] = 1e20
    if scaled:
        x[5] *= 2.0**-100
        x[6] *= 2.0**40
    return x


def _exact_calibration(gen: torch.Generator, heads: int, d: int) -> LayerCalibration:
    """Gains that are powers of two and offsets that are multiples of 1/16 below 4: the coded
    rows ``gain * (x - offset)`` of :func:`_exact_rows` stay exact with 15 bits."""

    def off() -> torch.Tensor:
        return torch.randint(-64, 64, (heads, d), generator=gen).float() / 16

    def gain() -> torch.Tensor:
        return 2.0 ** torch.randint(-2, 2, (heads, d), generator=gen).float()

    return LayerCalibration(off(), off(), gain(), off(), off(), gain())


def _rows_of(field: torch.Tensor, slots: torch.Tensor, block_size: int) -> torch.Tensor:
    """The entries ``[m, heads, width]`` of a field (``[blocks, heads, block_size, width]``) that
    the tokens with a slot were written to, in token order."""
    s = slots[slots >= 0].cpu()
    return field.cpu()[s // block_size, :, s % block_size]


def _assert_on_boundaries(ref, got, what: str, near: torch.Tensor) -> None:
    """Codes ``ref`` and ``got`` differ only where ``near`` holds (within one level there)."""
    diff = ref != got
    assert ((ref - got).abs() <= 1).all(), f"{what}: a code differs by more than one level"
    assert near[diff].all(), f"{what}: {int((diff & ~near).sum())} codes differ away from a rounding boundary"


def _lloyd_max_near(x: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """Where the float64 unit vector of rows ``x`` ``[m, heads, d]`` lies within 1e-5 (relative)
    of a boundary: the only coordinates whose codes a float32 rounding can move."""
    d = x.shape[-1]
    x = x.double()
    u = (x @ hadamard_matrix(d, torch.float64)) / x.norm(dim=-1, keepdim=True)
    b = bounds.double().cpu()
    gap = (u[..., None] - b).abs().min(-1).values
    return gap <= 1e-5 * b.abs().max()


def _check_exact(ref, got, preset, d, k, v, slots, cal, positions) -> None:
    """Every field of ``got`` equals ``ref`` but for codes on a rounding boundary, found in float64
    from the inputs: Lloyd-Max codes whose unit coordinate lies at a boundary, uniform value
    codes ``floor(x / scale + 0.5)`` whose ``x / scale`` lies at a half. A folded norm
    (``Preset.folds_norm``: ``||x|| / ||c||``) may differ by one float16 step (the sum of the
    centroids' squares is a float32 sum in the kernel's reduction order, not torch's), and by
    what one code level moves ``||c||`` in a row whose codes differ on a boundary."""
    p = tq_core.get_preset(preset)
    lay = p.block_layout(d, ref.shape[1], ref.shape[2])
    fr, fg = tq_core.block_fields(ref, lay), tq_core.block_fields(got, lay)
    bs = ref.shape[1]
    recoded = recoded_rows(fr, fg, p, d)
    for name in ("norm", "scale", "zero"):
        a, b = getattr(fr, name), getattr(fg, name)
        if a is None:
            continue
        if name in recoded:
            off = fp16_fields_off(a, b, 1, recoded[name])
            assert not off.any(), f"{name}: {int(off.sum())} folded norms differ from tq_core.store"
        else:
            assert torch.equal(a, b), f"{name}: {int((a != b).sum())} bytes differ from tq_core.store"
    keep = (slots >= 0).cpu()
    ck, cv = k.cpu().float()[keep], v.cpu().float()[keep]
    if cal is not None:
        ck, cv = cal.to("cpu").code(ck, cv, (positions.cpu() == 0)[keep])
    if p.key_is_fp8:
        assert torch.equal(fr.key, fg.key), "fp8 key bytes differ"
    else:
        ca, cb = (unpack_codes(_rows_of(f.key, slots, bs), p.key_bits, d) for f in (fr, fg))
        _assert_on_boundaries(ca, cb, "key", _lloyd_max_near(ck, tq_core.key_codebook(p, d)[1]))
    va, vb = (unpack_codes(_rows_of(f.value, slots, bs), p.value_bits, d) for f in (fr, fg))
    if p.value_is_uniform:
        scale = _rows_of(fr.scale, slots, bs).view(torch.float16).double()
        zero = _rows_of(fr.zero, slots, bs).view(torch.float16).double()
        q = (cv.double() - zero) / torch.where(scale > 0, scale, 1.0)
        near = ((q - q.floor()) - 0.5).abs() <= 1e-5 * q.abs().clamp(min=1.0)
        _assert_on_boundaries(va, vb, "value", near)
    elif p.value_kind == "symmetric":
        # cells of y / s by n / 2 = 8 per unit: a code's edge is an integer of 8 y / s
        scale = _rows_of(fr.scale, slots, bs).view(torch.float16).double()
        q = 8 * (cv.double() @ hadamard_matrix(d, torch.float64)) / torch.where(scale > 0, scale, 1.0)
        near = (q - q.round()).abs() <= 1e-5 * q.abs().clamp(min=1.0)
        _assert_on_boundaries(va, vb, "value", near)
    else:
        _assert_on_boundaries(va, vb, "value", _lloyd_max_near(cv, tq_core.value_codebook(p, d)[1]))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("preset", EVERY_PRESET)
def test_exact_inputs_store_the_same_bytes(preset, dtype, variant, gen, device, monkeypatch):
    """Rows whose float32 Hadamard sums are exact, with 15 significant bits in float32 or
    bfloat16's 8, and the non-finite and scaled rows of :func:`_exact_rows`: every variant
    writes tq_core.store's norms, scales and zero points bit for bit, and its codes except
    where a float32 rounding decides them (found in float64: :func:`_check_exact`). A wrong
    offset, row or reciprocal moves codes away from any boundary."""
    heads, d, n = 2, 128, 40
    calibrated = tq_core.get_preset(preset).calibrated
    k = _exact_rows(gen, n, heads, d, scaled=not calibrated).to(device, dtype)
    v = _exact_rows(gen, n, heads, d, scaled=not calibrated).to(device, dtype)
    cal = _exact_calibration(gen, heads, d) if calibrated else None
    extra = _extra(preset, gen, n, heads, d, device, cal)
    ref, got, nslots = caches(preset, d, 16, heads, gen, device, n)
    slots = torch.randperm(nslots, generator=gen)[:n].to(device)
    slots[11] = -1
    tq_core.store(k, v, ref, slots, preset, **extra)
    _store_variant(variant, monkeypatch, k, v, got, slots, preset, **extra)
    _check_exact(ref, got, preset, d, k, v, slots, cal, extra.get("positions"))


@pytest.mark.parametrize("var", ["TQ_STORE_ROTATION", "TQ_STORE_LEAN"])
def test_removed_store_knobs_are_refused(var, monkeypatch):
    """The store's ``rotation`` and ``lean`` knobs are gone (the rotation always by butterflies,
    the lean code always): setting either variable, even to 0, raises and says why."""
    assert not {"rotation", "lean"} & {f.name for f in fields(StoreConfig)}
    tuning.clear_cache()
    monkeypatch.setenv(var, "0")
    with pytest.raises(TuningError, match=f"{var} was removed"):
        tuning.store_config(torch.device("cpu"), "turboquant_k3v4_nc")


CANDS = Path(__file__).resolve().parents[3] / "docs" / "perf" / "scripts" / "store_candidates.py"


@pytest.mark.skipif(ON_GPU, reason="the interpreter's run of the script; on a GPU run it at its real shape")
def test_candidate_script_runs_end_to_end():
    """``store_candidates.py --small`` under Triton's interpreter: every preset, the current
    configuration and every candidate that applies, each compared with the current cache,
    and the JSON line last, so that the script cannot fail on the device for want of a run."""
    spec = importlib.util.spec_from_file_location("store_cands", CANDS)
    cands = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cands)
    env = dict(os.environ, TRITON_INTERPRET="1", TQ_TEST_DEVICE="cpu")
    out = subprocess.run(
        [sys.executable, str(CANDS), "--small"], env=env, capture_output=True, text=True, timeout=900, check=True
    )
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["small"] and summary["all_ok"], out.stdout
    want = {
        (p, name)
        for p in EVERY_PRESET
        for name in ("current", *cands.CANDIDATES)
        if name == "current" or cands.applies(p, cands.CANDIDATES[name])
    }
    got = {(r["preset"], r["config"]) for r in summary["results"]}
    assert got == want
    assert all(r["codes_differ"] == 0 for r in summary["results"] if r["config"] != "current")


class _GrabLaunch:
    """Stands in for the jitted store kernel: records its launch keywords instead of running."""

    def __init__(self) -> None:
        self.kwargs: dict | None = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kwargs = kwargs

        return launch


@pytest.mark.parametrize(("nvidia", "cap", "want"), [(True, 128, 128), (True, 0, None), (False, 128, None)])
def test_register_cap_reaches_nvidia_launches_only(nvidia, cap, want, monkeypatch, device):
    grab = _GrabLaunch()
    monkeypatch.setattr(ST, "_store_kernel", grab)
    monkeypatch.setattr(ST, "nvidia", lambda dev: nvidia)
    _, cache, _ = caches("turboquant_k3v4_nc", 64, 16, 1, torch.Generator().manual_seed(0), device, 4)
    x = torch.zeros(4, 1, 64, device=device)
    ST.store(x, x, cache, torch.arange(4, device=device), "turboquant_k3v4_nc", config=StoreConfig(max_registers=cap))
    assert grab.kwargs.get("maxnreg") == want


@pytest.mark.parametrize(("stride", "wide"), [((1 << 24) - 64, False), (1 << 24, True)])
def test_wide_offsets_where_a_row_stride_could_overflow_32_bits(stride, wide, monkeypatch, device):
    """The program's tokens ``r < block_t`` add ``r * stride`` in 32 bits: a row stride that
    could overflow them (here 2**24 rows apart with 128-token programs) launches the kernel
    with 64-bit offsets."""
    grab = _GrabLaunch()
    monkeypatch.setattr(ST, "_store_kernel", grab)
    _, cache, _ = caches("turboquant_k3v4_nc", 64, 16, 1, torch.Generator().manual_seed(0), device, 2)
    x = torch.zeros(stride + 64, dtype=torch.bfloat16, device=device).as_strided((2, 1, 64), (stride, 64, 1))
    ST.store(x, x, cache, torch.arange(2, device=device), "turboquant_k3v4_nc", config=StoreConfig(block_t=128))
    assert grab.kwargs["WIDE_OFFSETS"] is wide


def test_wide_offsets_bound():
    """64-bit offsets exactly where ``block_t`` times the largest row stride (keys, values or
    slot mapping) reaches 2**31."""
    assert not ST.wide_offsets(16, 3 * 128, 3 * 128, 1)
    assert not ST.wide_offsets(16, (1 << 27) - 1, 1, 1)
    assert ST.wide_offsets(16, 1 << 27, 1, 1)
    assert ST.wide_offsets(128, 1, 1 << 24, 1)
    assert ST.wide_offsets(16, 1, 1, 1 << 27)
    assert not ST.wide_offsets(128, 0, 0, (1 << 24) - 1)
