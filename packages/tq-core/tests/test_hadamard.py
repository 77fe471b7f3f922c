"""Fast Walsh-Hadamard transform vs an explicit Kronecker-built matrix."""

from __future__ import annotations

import pytest
import torch
from tqc_helpers import kron_hadamard, randn

import tq_core
from tq_core import fwht, hadamard_matrix, ifwht, random_signs

DIMS = [1, 2, 4, 8, 64, 128, 256, 512, 1024]


@pytest.mark.parametrize("d", DIMS)
def test_fwht_matches_explicit_matrix(gen, d):
    x = randn(gen, 7, d, dtype=torch.float64)
    h = kron_hadamard(d)
    torch.testing.assert_close(fwht(x), x @ h.T, rtol=0, atol=1e-12)
    torch.testing.assert_close(hadamard_matrix(d, torch.float64), h, rtol=0, atol=1e-15)


@pytest.mark.parametrize("d", [64, 128, 512])
def test_fwht_float32_close_to_float64(gen, d):
    x = randn(gen, 11, d, dtype=torch.float64)
    y = fwht(x.float())
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), x @ kron_hadamard(d).T, rtol=0, atol=1e-5)


@pytest.mark.parametrize("d", [2, 16, 128])
def test_orthonormal(d):
    h = fwht(torch.eye(d, dtype=torch.float64))  # rows: H e_i = column i of H
    torch.testing.assert_close(h @ h.T, torch.eye(d, dtype=torch.float64), rtol=0, atol=1e-12)
    # Sylvester H is symmetric
    torch.testing.assert_close(h, h.T, rtol=0, atol=0)


@pytest.mark.parametrize("d", [8, 128, 256])
def test_involution_and_norm(gen, d):
    x = randn(gen, 3, 5, d, dtype=torch.float64)
    torch.testing.assert_close(fwht(fwht(x)), x, rtol=0, atol=1e-12)
    torch.testing.assert_close(ifwht(fwht(x)), x, rtol=0, atol=1e-12)
    torch.testing.assert_close(fwht(x).norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=0)


@pytest.mark.parametrize("d", [16, 128])
def test_random_signs(gen, seed, d):
    s = random_signs(d, seed)
    assert s.dtype == torch.float32 and s.shape == (d,)
    assert set(s.tolist()) <= {-1.0, 1.0}
    assert torch.equal(s, random_signs(d, seed))  # reproducible
    x = randn(gen, 4, d, dtype=torch.float64)
    sd = s.double()
    y = fwht(x, sd)
    torch.testing.assert_close(y, (x * sd) @ kron_hadamard(d).T, rtol=0, atol=1e-12)
    torch.testing.assert_close(ifwht(y, sd), x, rtol=0, atol=1e-12)


def test_random_signs_differ_by_seed():
    draws = {tuple(random_signs(64, s).tolist()) for s in range(5)}
    assert len(draws) == 5


def test_batched_leading_dims(gen):
    d = 32
    x = randn(gen, 2, 3, 5, d, dtype=torch.float64)
    y = fwht(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y.reshape(-1, d), x.reshape(-1, d) @ kron_hadamard(d).T, rtol=0, atol=1e-12)
    # a non-contiguous input gives the same result
    xt = x.transpose(0, 2)
    torch.testing.assert_close(fwht(xt), y.transpose(0, 2), rtol=0, atol=1e-12)


def test_rotate_is_fwht_in_float32(gen):
    x = randn(gen, 3, 128, dtype=torch.float16)
    y = tq_core.rotate(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), x.double() @ kron_hadamard(128).T, rtol=0, atol=1e-5)


@pytest.mark.parametrize("d", [3, 6, 96, 100, 0])
def test_non_power_of_two_raises(d):
    with pytest.raises(tq_core.ShapeError, match="power of two") as ei:
        fwht(torch.zeros(2, d))
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, tq_core.TQError)
    with pytest.raises(tq_core.ShapeError, match="power of two"):
        hadamard_matrix(d)
