"""``code_bins``: codebook codes from a table of uniform bins, against ``searchsorted``.

The shipped codebooks are checked in the kernel by test_store.py (on, just below and just
above every boundary); here the table's builder meets codebooks it was not shaped around:
uneven gaps, one boundary, a boundary at zero, and the inputs it must refuse."""

from __future__ import annotations

import itertools

import pytest
import torch
import triton
import triton.language as tl

from tq_triton.code_bins import bin_table, codebook_codes_bins


@triton.jit
def _bins_kernel(U, Table, Out, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Out + i, codebook_codes_bins(tl.load(U + i), Table).to(tl.int32))


def _codes(u: torch.Tensor, table: torch.Tensor, device: str) -> torch.Tensor:
    n = 1 << (u.numel() - 1).bit_length()
    padded = torch.cat([u, torch.zeros(n - u.numel())]).to(device)
    out = torch.full((n,), -1, dtype=torch.int32, device=device)
    _bins_kernel[(1,)](padded, table.to(device), out, N=n)
    return out[: u.numel()].cpu()


def _probes(bounds: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    down = torch.full_like(bounds, -float("inf"))
    up = torch.full_like(bounds, float("inf"))
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e30, -1e30])
    span = float(bounds.abs().max()) + 1e-3
    return torch.cat(
        [
            bounds,
            torch.nextafter(bounds, down),
            torch.nextafter(bounds, up),
            special,
            (torch.rand(300, generator=gen) * 2 - 1) * 1.2 * span,
        ]
    )


CODEBOOKS = {
    "one boundary": [0.25],
    "zero and uneven gaps": [-1.0, -0.3, 0.0, 0.05, 0.5, 2.0],
    "negative only": [-3.0, -2.5, -2.45, -1.0],
    "positive only": [0.5, 0.75, 2.0],
    "tiny numbers": [-3e-30, 1e-31, 2e-30],
}


@pytest.mark.parametrize("name", sorted(CODEBOOKS))
def test_bins_count_the_boundaries_at_or_below(name, gen, device):
    """The code of every probe (each boundary, its float32 neighbours, ±inf, NaN, ±0 and
    random points) is the number of boundaries <= it; a NaN takes code 0."""
    bounds = torch.tensor(CODEBOOKS[name], dtype=torch.float32)
    table = bin_table(bounds)
    assert table is not None
    u = _probes(bounds, gen)
    want = torch.searchsorted(bounds, u, right=True).to(torch.int32)
    want[torch.isnan(u)] = 0
    torch.testing.assert_close(_codes(u, table, device), want, rtol=0, atol=0)


def test_random_codebooks_fit_or_are_refused(gen):
    """Random codebooks of 1 to 63 boundaries, centred or shifted to one side of zero (a
    negative offset or boundary fills the words' high halves): the builder either returns a
    table of at most 256 bins (checked against the search when built) or refuses."""
    built = 0
    for size, shift in itertools.product(range(1, 64, 3), (0.0, 5.0, -5.0)):
        bounds = torch.sort(torch.randn(size, generator=gen)).values + shift
        table = bin_table(bounds)
        if table is not None:
            built += 1
            assert table.dtype == torch.int64 and 3 <= table.numel() <= 258
    assert built > 0


@pytest.mark.parametrize(
    "bounds",
    [[0.0, 0.0, 1.0], [1.0, 0.5], [0.0, float("nan")], [float("inf")], [], [0.0, 1e-6, 1.0]],
    ids=["equal", "descending", "nan", "inf", "empty", "too many bins"],
)
def test_codebooks_without_bins_are_refused(bounds):
    """Equal, unsorted or non-finite boundaries, none at all, or a spread that needs more
    than ``max_bins`` bins: no table (the store then searches)."""
    assert bin_table(torch.tensor(bounds, dtype=torch.float32)) is None
