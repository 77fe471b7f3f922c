"""Lloyd-Max codebooks: shipped table vs solver, closed forms, and Monte Carlo distortion."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tqc_helpers import kron_hadamard

from tq_core import distortion, fwht, get_codebook, lloyd_max
from tq_core.codebooks import BETA_DIMS, BITS, GAUSSIAN_BITS

# Lloyd-Max centroids for N(0,1), positive half (Max 1960): docs/references.md#lloyd-max-codebooks
REFERENCE_CENTROIDS = {
    1: [0.7979],
    2: [0.4528, 1.5104],
    3: [0.2451, 0.7560, 1.3439, 2.1519],
    4: [0.1284, 0.3880, 0.6568, 0.9423, 1.2562, 1.6180, 2.0690, 2.7326],
}
# E||x - x_hat||^2 for b = 1..4, Gaussian (Max 1960) and exact Beta codebook at d=128 (computed):
# docs/references.md#lloyd-max-codebooks
REFERENCE_GAUSSIAN = {1: 0.3634, 2: 0.1175, 3: 0.0345, 4: 0.0095}
REFERENCE_BETA_128 = {1: 0.3609, 2: 0.1160, 3: 0.0340, 4: 0.0093}


@pytest.mark.parametrize("bits", BITS)
def test_gaussian_centroids_match_reference_to_4_decimals(bits):
    cb = get_codebook(bits, "gaussian")
    positive = [c for c in cb.centroids if c > 0]
    assert [round(c, 4) for c in positive] == REFERENCE_CENTROIDS[bits]


@pytest.mark.parametrize(
    "source,d,bits",
    [("gaussian", None, b) for b in GAUSSIAN_BITS] + [("beta", d, b) for d in BETA_DIMS for b in BITS],
)
def test_shipped_codebooks_are_sorted_symmetric(source, d, bits):
    cb = get_codebook(bits, source, d)
    c = np.array(cb.centroids)
    assert len(c) == 2**bits
    assert np.all(np.diff(c) > 0)
    np.testing.assert_array_equal(c, -c[::-1])
    np.testing.assert_allclose(cb.boundaries, (c[1:] + c[:-1]) / 2, rtol=0, atol=0)
    assert 4.0**-bits < cb.distortion < math.sqrt(3) * math.pi / 2 * 4.0**-bits


@pytest.mark.parametrize("bits", GAUSSIAN_BITS)
def test_shipped_gaussian_equals_regenerated(bits):
    new, shipped = lloyd_max(bits, "gaussian"), get_codebook(bits, "gaussian")
    np.testing.assert_allclose(new.centroids, shipped.centroids, rtol=0, atol=1e-6)
    assert abs(new.distortion - shipped.distortion) < 1e-6
    assert abs(distortion(bits) - shipped.distortion) == 0


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("bits", BITS)
def test_shipped_beta_equals_regenerated(d, bits):
    new, shipped = lloyd_max(bits, "beta", d), get_codebook(bits, "beta", d)
    np.testing.assert_allclose(new.centroids, shipped.centroids, rtol=0, atol=1e-6)
    assert abs(new.distortion - shipped.distortion) < 1e-6


def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _Phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


@pytest.mark.parametrize("bits", GAUSSIAN_BITS)
def test_gaussian_codebook_satisfies_lloyd_max_conditions_closed_form(bits):
    """Each centroid is its cell's conditional mean, E[X | a < X < b] = (phi(a) - phi(b)) / (Phi(b) - Phi(a))."""
    cb = get_codebook(bits, "gaussian")
    edges = [-math.inf, *cb.boundaries, math.inf]
    dist = 1.0
    for c, a, b in zip(cb.centroids, edges[:-1], edges[1:], strict=True):
        pa, pb = (0.0 if math.isinf(a) else _phi(a)), (0.0 if math.isinf(b) else _phi(b))
        mass = _Phi(b) - _Phi(a)
        mean = (pa - pb) / mass
        assert abs(c - mean) < 1e-7
        dist -= mass * mean * mean  # E[X^2] - sum_i P_i c_i^2
    assert abs(cb.distortion - dist) < 1e-7


def test_beta_codebook_satisfies_centroid_condition_d128():
    """Centroid condition against the density (1 - t^2)^((d-3)/2), integrated on an independent grid."""
    d, bits = 128, 3
    cb = get_codebook(bits, "beta", d)
    t = np.linspace(-1, 1, 400_001)
    w = np.power(np.clip(1 - t * t, 0, None), (d - 3) / 2)
    x = t * math.sqrt(d)
    edges = [-np.inf, *cb.boundaries, np.inf]
    for c, a, b in zip(cb.centroids, edges[:-1], edges[1:], strict=True):
        m = (x >= a) & (x < b)
        assert abs(c - np.sum(x[m] * w[m]) / np.sum(w[m])) < 1e-4


def _nearest(y: torch.Tensor, centroids: torch.Tensor, chunk: int = 1 << 20) -> torch.Tensor:
    """Nearest centroid by brute force (argmin of the distance), chunked."""
    flat = y.reshape(-1)
    out = torch.empty_like(flat)
    for i in range(0, flat.numel(), chunk):
        part = flat[i : i + chunk]
        idx = (part[:, None] - centroids[None, :]).abs().argmin(dim=1)
        out[i : i + chunk] = centroids[idx]
    return out.view_as(y)


N_VECTORS = 1 << 16  # 65,536
D = 128


def _monte_carlo_mse(x: torch.Tensor, centroids: list[float]) -> float:
    c = torch.tensor(centroids, dtype=torch.float32) / math.sqrt(D)
    y = fwht(x)  # Hadamard-rotate
    y_hat = _nearest(y, c)  # quantize each coordinate
    x_hat = fwht(y_hat)  # un-rotate (H is its own inverse)
    return float((x.double() - x_hat.double()).pow(2).sum(-1).mean())


def test_hadamard_used_by_monte_carlo_is_the_explicit_one(gen):
    x = torch.randn(4, D, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(fwht(x), x @ kron_hadamard(D).T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bits", GAUSSIAN_BITS)
def test_distortion_gaussian_monte_carlo(gen, bits):
    """Gaussian codebook on N(0, 1/d) coordinates reproduces the published distortion within 1%
    (5 and 6 bits: the figure the closed-form test checks)."""
    x = torch.randn(N_VECTORS, D, generator=gen) / math.sqrt(D)
    mse = _monte_carlo_mse(x, list(get_codebook(bits, "gaussian").centroids))
    ref = REFERENCE_GAUSSIAN.get(bits, distortion(bits))
    assert abs(mse - ref) / ref < 0.01, (mse, ref)
    assert 4.0**-bits < mse < math.sqrt(3) * math.pi / 2 * 4.0**-bits


@pytest.mark.parametrize("bits", BITS)
def test_distortion_beta_monte_carlo(gen, bits):
    """Exact Beta codebook on rotated random unit vectors at d=128 reproduces the tabulated figure within 1%."""
    x = torch.randn(N_VECTORS, D, generator=gen)
    x = x / x.norm(dim=-1, keepdim=True)
    mse = _monte_carlo_mse(x, list(get_codebook(bits, "beta", D).centroids))
    ref = REFERENCE_BETA_128[bits]
    assert abs(mse - ref) / ref < 0.01, (mse, ref)
    assert 4.0**-bits < mse < math.sqrt(3) * math.pi / 2 * 4.0**-bits


@pytest.mark.parametrize("bits", BITS)
def test_shipped_distortion_figures_match_reference(bits):
    assert abs(distortion(bits) - REFERENCE_GAUSSIAN[bits]) / REFERENCE_GAUSSIAN[bits] < 0.005
    beta = distortion(bits, "beta", 128)
    assert abs(beta - REFERENCE_BETA_128[bits]) / REFERENCE_BETA_128[bits] < 0.01
