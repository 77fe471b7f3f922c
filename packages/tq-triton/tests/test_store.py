"""tq_triton.store against tq_core.store: byte-identical up to rounding-boundary codes."""

from __future__ import annotations

import importlib

import pytest
import torch
import triton
import triton.language as tl
from tqt_helpers import ON_GPU

import tq_core
import tq_triton
from tq_core import unpack_codes
from tq_core.testing import random_calibration
from tq_triton.code_bins import bin_table, codebook_codes_bins
from tq_triton.device_tensors import codebook
from tq_triton.store import codebook_codes, codebook_codes_bsearch

N_TOKENS = 3001 if ON_GPU else 77


def caches(preset, head_dim, block_size, heads, g, device, n):
    slot = tq_core.get_preset(preset).layout(head_dim).slot_size_aligned
    nblocks = (n + block_size - 1) // block_size + 2
    poison = torch.randint(0, 256, (nblocks, block_size, heads, slot), generator=g, dtype=torch.uint8).to(device)
    return poison.clone(), poison.clone(), nblocks * block_size


@pytest.mark.parametrize("preset", list(tq_core.PRESETS))
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_store_matches_reference(preset, head_dim, block_size, dtype, gen, device):
    g = gen
    heads = 3
    n = N_TOKENS
    ref, got, nslots = caches(preset, head_dim, block_size, heads, g, device, n)
    k = (torch.randn(n, heads, head_dim, generator=g) * 3).to(device, dtype)
    v = torch.randn(n, heads, head_dim, generator=g).to(device, dtype)
    slots = torch.randperm(nslots, generator=g)[:n].to(device)
    slots[::7] = -1  # padding tokens are skipped
    tq_core.store(k, v, ref, slots, preset)
    tq_triton.store(k, v, got, slots, preset)
    same = (ref == got).float().mean().item()
    assert same >= 0.999, f"only {same:.5f} of bytes identical"
    _differences_are_rounding_boundaries(ref, got, preset, head_dim, k, slots)


def recoded_rows(fr, fg, p, head_dim: int) -> dict[str, torch.Tensor]:
    """For a format that folds the centroids' norm into the stored one (``Preset.folds_norm``):
    per folded fp16 field (``"norm"`` of keys, ``"scale"`` of Lloyd-Max values), the rows of ``fg`` whose
    codes differ from ``fr``'s; empty for other formats."""
    out = {}
    if p.folds_norm:
        folded = [("norm", "key", p.key_bits)]
        if p.value_kind == "lloyd_max":  # a symmetric value's scale does not depend on its codes
            folded.append(("scale", "value", p.value_bits))
        for name, field, bits in folded:
            x, y = getattr(fr, field), getattr(fg, field)
            ca = unpack_codes(x.reshape(-1, x.shape[-1]), bits, head_dim)
            cb = unpack_codes(y.reshape(-1, y.shape[-1]), bits, head_dim)
            out[name] = (ca != cb).any(-1).reshape(x.shape[:-1])
    return out


def fp16_fields_off(a: torch.Tensor, b: torch.Tensor, limit: int, recoded: torch.Tensor | None = None) -> torch.Tensor:
    """Which fp16 cache fields (bytes, last dim 2) of ``b`` are more than ``limit`` float16 steps
    from ``a`` (the distance of their bit patterns as integers, exact for finite values of one
    sign). A folded norm of a row whose codes differ (``recoded``) may differ by what one code
    level moves the centroids' norm: at most 5%."""
    ia, ib = (t.contiguous().view(torch.int16).squeeze(-1).int() for t in (a, b))
    off = (ia - ib).abs() > limit
    if recoded is not None:
        fa, fb = (t.contiguous().view(torch.float16).squeeze(-1).float() for t in (a, b))
        off &= ~(recoded & ((fa - fb).abs() <= 0.05 * fa.abs()))
    return off


def _differences_are_rounding_boundaries(ref, got, preset, head_dim, k, slots):
    p = tq_core.get_preset(preset)
    lay = p.block_layout(head_dim, ref.shape[1], ref.shape[2])
    fr, fg = tq_core.block_fields(ref, lay), tq_core.block_fields(got, lay)
    # fp16 norm and scale come from float32 sums / divisions done in another order:
    # at most one fp16 step apart (a rounding boundary); the zero point (the minimum) is exact.
    # A format that folds the centroids' norm into the stored one may differ more where a code
    # of that row sits on a boundary
    recoded = recoded_rows(fr, fg, p, head_dim)
    for name in ("norm", "scale", "zero"):
        a, b = getattr(fr, name), getattr(fg, name)
        if a is None:
            continue
        limit = 0 if name == "zero" else 1
        off = fp16_fields_off(a, b, limit, recoded.get(name))
        assert not off.any(), f"{name} differs by more than {limit} fp16 step"
    if p.key_is_fp8:
        assert torch.equal(fr.key, fg.key), "fp8 key bytes differ"
    else:
        ca = unpack_codes(fr.key.reshape(-1, fr.key.shape[-1]), p.key_bits, head_dim)
        cb = unpack_codes(fg.key.reshape(-1, fg.key.shape[-1]), p.key_bits, head_dim)
        assert ((ca - cb).abs() <= 1).all(), "a key code differs by more than one level"
    va = unpack_codes(fr.value.reshape(-1, fr.value.shape[-1]), p.value_bits, head_dim)
    vb = unpack_codes(fg.value.reshape(-1, fg.value.shape[-1]), p.value_bits, head_dim)
    assert ((va - vb).abs() <= 1).all(), "a value code differs by more than one level"


def test_store_strided_key_view(gen, device):
    """vLLM hands in key/value as views of the fused qkv projection."""
    g = gen
    n, h, d = 40, 2, 64
    qkv = torch.randn(n, 3 * h * d, generator=g).to(device)
    k = qkv[:, h * d : 2 * h * d].view(n, h, d)
    v = qkv[:, 2 * h * d :].view(n, h, d)
    ref, got, nslots = caches("turboquant_k3v4_nc", d, 16, h, g, device, n)
    slots = torch.randperm(nslots, generator=g)[:n].to(device)
    tq_core.store(k, v, ref, slots, "turboquant_k3v4_nc")
    tq_triton.store(k, v, got, slots, "turboquant_k3v4_nc")
    assert (ref == got).float().mean().item() >= 0.999


def test_store_fp8_saturates(gen, device):
    d = 64
    k = torch.full((2, 1, d), 1e6, device=device)
    k[1] = -1e6
    v = torch.randn(2, 1, d, device=device)
    _, got, _ = caches("turboquant_k8v4", d, 16, 1, gen, device, 2)
    tq_triton.store(k, v, got, torch.tensor([0, 1], device=device), "turboquant_k8v4")
    lay = tq_core.get_preset("turboquant_k8v4").block_layout(d, 16, 1)
    keys = tq_core.block_fields(got, lay).key[0, 0, :2].contiguous().view(torch.float8_e4m3fn).float()
    assert torch.equal(keys[0], torch.full((d,), 448.0, device=device))
    assert torch.equal(keys[1], torch.full((d,), -448.0, device=device))


@triton.jit
def _codes_kernel(U, Bounds, Out, N: tl.constexpr, NUM_BOUNDS: tl.constexpr, SEARCH: tl.constexpr):
    i = tl.arange(0, N)
    if SEARCH == 2:
        codes = codebook_codes_bins(tl.load(U + i), Bounds)
    elif SEARCH == 1:
        codes = codebook_codes_bsearch(tl.load(U + i), Bounds, (NUM_BOUNDS + 1).bit_length() - 1)
    else:
        codes = codebook_codes(tl.load(U + i), Bounds, NUM_BOUNDS)
    tl.store(Out + i, codes.to(tl.int32))


# every codebook the store searches: the keys of the codebook presets (3, 4 and 6 bits) and
# the calibrated formats' Lloyd-Max values (3 and 5 bits; tq_k4v4's symmetric values are
# computed, not searched)
CODEBOOKS = [(n, "key") for n, p in {**tq_core.PRESETS, **tq_core.CALIBRATED_PRESETS}.items() if not p.key_is_fp8] + [
    (n, "value") for n, p in tq_core.CALIBRATED_PRESETS.items() if p.value_kind == "lloyd_max"
]


def _bounds(preset: str, kind: str, head_dim: int, device: str) -> torch.Tensor:
    p = tq_core.get_preset(preset)
    if kind == "key":
        return codebook(p, head_dim, torch.device(device))[1]
    return tq_core.value_codebook(p, head_dim, device)[1]


@pytest.mark.parametrize("search", [0, 1, 2])
@pytest.mark.parametrize(("preset", "kind"), CODEBOOKS)
def test_codes_on_and_around_every_boundary(preset, kind, search, gen, device):
    """The store's codes are the number of boundaries <= u (vLLM's rule: a coordinate on a
    boundary takes the upper code), also exactly on, just below and just above each boundary,
    and for infinities and NaN, counted (``search`` 0), by binary search (1) or by uniform
    bins (2), the store's ``code_search`` values. The byte comparisons above exclude boundary
    codes."""
    bounds = _bounds(preset, kind, 128, device)
    below = torch.nextafter(bounds, torch.full_like(bounds, -float("inf")))
    above = torch.nextafter(bounds, torch.full_like(bounds, float("inf")))
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0], device=device)
    rand = torch.randn(256, generator=gen).to(device) * bounds.abs().max()
    u = torch.cat([bounds, below, above, special, rand])
    n = 1 << (u.numel() - 1).bit_length()
    u = torch.cat([u, torch.zeros(n - u.numel(), device=device)])
    out = torch.full((n,), -1, dtype=torch.int32, device=device)
    table = bounds if search < 2 else bin_table(bounds).to(device)
    _codes_kernel[(1,)](u, table, out, N=n, NUM_BOUNDS=bounds.numel(), SEARCH=search)
    want = torch.searchsorted(bounds, u, right=True).to(torch.int32)
    want[torch.isnan(u)] = 0  # every comparison with NaN is false
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("search", ["1", "2"])
@pytest.mark.parametrize("preset", sorted({n for n, _ in CODEBOOKS}))
def test_code_searches_store_the_same_bytes(preset, search, gen, device, monkeypatch):
    """The store with ``code_search`` 1 or 2 (``TQ_CODE_SEARCH``: binary search, uniform
    bins) writes the bytes of the counting store, NaN and overflowing rows included
    (calibrated formats: keys and values)."""
    heads, d, n = 2, 128, 61
    k = (torch.randn(n, heads, d, generator=gen) * 3).to(device)
    v = torch.randn(n, heads, d, generator=gen).to(device)
    k[3, 1, 7] = float("nan")
    k[5, 0] = 1e20
    v[8, 1, 2] = float("nan")
    extra = {}
    if tq_core.get_preset(preset).calibrated:
        pos = torch.randint(0, 3, (n,), generator=gen).to(device)
        extra = {"calibration": random_calibration(gen, heads, d).to(device), "positions": pos}
    first, second, nslots = caches(preset, d, 16, heads, gen, device, n)
    slots = torch.randperm(nslots, generator=gen)[:n].to(device)
    monkeypatch.setenv("TQ_CODE_SEARCH", "0")
    tq_triton.store(k, v, first, slots, preset, **extra)
    monkeypatch.setenv("TQ_CODE_SEARCH", search)
    tq_triton.store(k, v, second, slots, preset, **extra)
    assert torch.equal(first, second)


def test_bins_fall_back_to_the_search_without_a_table(gen, device, monkeypatch):
    """``code_search`` 2 for a codebook that has no bins table (``cached_bins`` None) runs the
    binary search: the bytes of ``code_search`` 1 (calibrated keys and values)."""
    store_module = importlib.import_module("tq_triton.store")  # the package's `store` is the function

    heads, d, n = 2, 128, 37
    k = torch.randn(n, heads, d, generator=gen).to(device)
    v = torch.randn(n, heads, d, generator=gen).to(device)
    pos = torch.randint(0, 3, (n,), generator=gen).to(device)
    extra = {"calibration": random_calibration(gen, heads, d).to(device), "positions": pos}
    first, second, nslots = caches("tq_k4v3", d, 16, heads, gen, device, n)
    slots = torch.randperm(nslots, generator=gen)[:n].to(device)
    monkeypatch.setenv("TQ_CODE_SEARCH", "1")
    tq_triton.store(k, v, first, slots, "tq_k4v3", **extra)
    monkeypatch.setattr(store_module, "cached_bins", lambda *args: None)
    monkeypatch.setenv("TQ_CODE_SEARCH", "2")
    tq_triton.store(k, v, second, slots, "tq_k4v3", **extra)
    assert torch.equal(first, second)
