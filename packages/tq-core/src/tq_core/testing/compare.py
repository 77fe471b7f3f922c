"""One rule for comparing attention outputs: max abs error over the expected output's scale."""

from __future__ import annotations

import torch


def attention_error(actual: torch.Tensor, expected: torch.Tensor, scale: float | None = None) -> float:
    """``max |actual - expected| / scale``; ``scale`` defaults to ``max |expected|`` (at least 1e-30).

    NaN anywhere in ``actual`` gives ``inf``.
    """
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: actual {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.numel() == 0:
        return 0.0
    if bool(torch.isnan(a).any()):
        return float("inf")
    ref = float(e.abs().max()) if scale is None else float(scale)
    return float((a - e).abs().max()) / max(ref, 1e-30)


def assert_attention_close(
    actual: torch.Tensor, expected: torch.Tensor, *, tol: float, scale: float | None = None, what: str = "attention"
) -> float:
    """Fail when :func:`attention_error` exceeds ``tol``; the message names the worst row and head.

    Returns the error, so tests can print or collect it.
    """
    err = attention_error(actual, expected, scale)
    if not err <= tol:
        diff = (actual.detach().to("cpu", torch.float64) - expected.detach().to("cpu", torch.float64)).abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))
        worst = torch.nonzero(diff == diff.max())[0].tolist()
        raise AssertionError(
            f"{what}: error {err:.3g} (max abs diff / output scale) exceeds tol {tol:.3g}; "
            f"worst at index {worst}: got {float(actual[tuple(worst)]):.6g}, "
            f"expected {float(expected[tuple(worst)]):.6g}"
        )
    return err
