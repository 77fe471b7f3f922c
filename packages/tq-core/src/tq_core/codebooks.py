"""Lloyd-Max scalar codebooks for the coordinates of a rotated unit vector.

Two source distributions, both expressed in units of ``1/sqrt(d)`` (so that a codebook
is multiplied by ``1/sqrt(d)`` before use and both have unit variance):

- ``"gaussian"``: N(0, 1), the large-d limit. The presets use this one, as vLLM does.
- ``"beta"``: the exact law of one coordinate of a uniformly random unit vector in d
  dimensions, density ∝ (1 - t²)^((d-3)/2) on [-1, 1], rescaled by sqrt(d).

In these units the expected squared error of a whole unit vector, E||x - x̂||², equals the
scalar distortion of the codebook, which is what :func:`distortion` returns.

The shipped table (``data/codebooks.json``) is produced by :func:`build_table`.
``python -m tq_core.codebooks`` solves it again and compares it with the shipped one;
``--write PATH`` writes the solved table to ``PATH`` (the package data is only written
when ``PATH`` names it).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

BITS = (1, 2, 3, 4)  # every source; vLLM's presets use the Gaussian ones
GAUSSIAN_BITS = (*BITS, 5, 6)  # 5 and 6: the values and keys of tq's calibrated tq_k6v5
BETA_DIMS = (16, 32, 64, 128, 256, 512, 1024)

_GRID_POINTS = 1 << 21


@dataclass(frozen=True)
class Codebook:
    """Centroids (ascending; code ``i`` is ``centroids[i]``) and their distortion."""

    centroids: tuple[float, ...]
    distortion: float

    @property
    def boundaries(self) -> tuple[float, ...]:
        c = self.centroids
        return tuple((a + b) / 2 for a, b in itertools.pairwise(c))


def _density(source: str, d: int | None) -> tuple[np.ndarray, np.ndarray]:
    if source == "gaussian":
        x = np.linspace(-12.0, 12.0, _GRID_POINTS)
        p = np.exp(-0.5 * x * x)
    elif source == "beta":
        if d is None or d < 4 or d & (d - 1):
            raise ValueError(f"d={d!r}: the beta source needs a power of two >= 4")
        s = math.sqrt(d)
        x = np.linspace(-s, s, _GRID_POINTS)
        t = x / s
        with np.errstate(divide="ignore"):
            p = np.exp((d - 3) / 2 * np.log1p(-t * t))
        p[~np.isfinite(p)] = 0.0
    else:
        raise ValueError(f"source={source!r}: expected 'gaussian' or 'beta'")
    return x, p


def lloyd_max(bits: int, source: str = "gaussian", d: int | None = None, tol: float = 1e-13) -> Codebook:
    """Solve the Lloyd-Max conditions for ``2**bits`` levels by fixed-point iteration."""
    x, p = _density(source, d)
    dx = x[1] - x[0]

    # cumulative integrals (trapezoid) of p, x p and x^2 p give cell probabilities and moments
    def cumulative(f: np.ndarray) -> np.ndarray:
        out = np.empty_like(f)
        out[0] = 0.0
        np.cumsum((f[1:] + f[:-1]) * (dx / 2), out=out[1:])
        return out

    c0, c1, c2 = cumulative(p), cumulative(x * p), cumulative(x * x * p)
    total = c0[-1]
    second_moment = c2[-1] / total

    n = 1 << bits
    # start from equal-probability cells
    q = np.interp((np.arange(n) + 0.5) / n * total, c0, x)
    for _ in range(100_000):
        edges = np.concatenate(([x[0]], (q[:-1] + q[1:]) / 2, [x[-1]]))
        m0 = np.diff(np.interp(edges, x, c0))
        m1 = np.diff(np.interp(edges, x, c1))
        new = m1 / m0
        new = (new - new[::-1]) / 2  # the densities are symmetric: keep the codebook exactly so
        done = np.max(np.abs(new - q)) < tol
        q = new
        if done:
            break
    edges = np.concatenate(([x[0]], (q[:-1] + q[1:]) / 2, [x[-1]]))
    probs = np.diff(np.interp(edges, x, c0)) / total
    dist = float(second_moment - np.sum(probs * q * q))
    return Codebook(tuple(float(v) for v in q), dist)


def build_table() -> dict:
    table: dict = {"units": "1/sqrt(d)", "gaussian": {}, "beta": {}}
    for b in GAUSSIAN_BITS:
        cb = lloyd_max(b, "gaussian")
        table["gaussian"][str(b)] = {"centroids": list(cb.centroids), "distortion": cb.distortion}
    for d in BETA_DIMS:
        table["beta"][str(d)] = {}
        for b in BITS:
            cb = lloyd_max(b, "beta", d)
            table["beta"][str(d)][str(b)] = {"centroids": list(cb.centroids), "distortion": cb.distortion}
    return table


@functools.cache
def _shipped() -> dict:
    text = resources.files("tq_core").joinpath("data/codebooks.json").read_text()
    return json.loads(text)


def get_codebook(bits: int, source: str = "gaussian", d: int | None = None) -> Codebook:
    """The shipped codebook (``source="beta"`` needs ``d`` in :data:`BETA_DIMS`)."""
    allowed = GAUSSIAN_BITS if source == "gaussian" else BITS
    if bits not in allowed:
        raise ValueError(f"bits={bits!r}: the shipped {source} codebooks cover {allowed}")
    table = _shipped()
    if source == "gaussian":
        entry = table["gaussian"][str(bits)]
    elif source == "beta":
        if d not in BETA_DIMS:
            raise ValueError(f"d={d!r}: shipped beta codebooks cover {BETA_DIMS}; use lloyd_max() for others")
        entry = table["beta"][str(d)][str(bits)]
    else:
        raise ValueError(f"source={source!r}: expected 'gaussian' or 'beta'")
    return Codebook(tuple(entry["centroids"]), entry["distortion"])


def distortion(bits: int, source: str = "gaussian", d: int | None = None) -> float:
    """Expected ||x - x̂||² of a unit vector quantized with that codebook (no norm correction)."""
    return get_codebook(bits, source, d).distortion


def table_difference(a: dict, b: dict) -> float:
    """Largest absolute difference between two tables' centroids and distortions
    (``inf`` when they do not hold the same codebooks)."""
    worst = 0.0

    def walk(x: object, y: object) -> None:
        nonlocal worst
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                worst = math.inf
                return
            for k in x:
                walk(x[k], y[k])
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                worst = math.inf
                return
            for u, v in zip(x, y, strict=True):
                walk(u, v)
        elif isinstance(x, int | float) and isinstance(y, int | float):
            worst = max(worst, abs(float(x) - float(y)))
        elif x != y:
            worst = math.inf

    walk(a, b)
    return worst


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tq_core.codebooks",
        description=(
            "Solve the Lloyd-Max codebooks that tq_core ships (Gaussian source for bits "
            f"{', '.join(map(str, GAUSSIAN_BITS))}; exact Beta source for bits {', '.join(map(str, BITS))} "
            f"and d in {', '.join(map(str, BETA_DIMS))}) "
            "and compare them with the shipped table, or write them to a file. By default nothing is "
            "written: the command prints the largest difference and exits 1 when it exceeds --tolerance. "
            "Solving takes a few seconds."
        ),
        epilog=(
            "To update the shipped table from a source checkout: python -m tq_core.codebooks "
            "--write packages/tq-core/src/tq_core/data/codebooks.json"
        ),
    )
    p.add_argument(
        "--write",
        metavar="PATH",
        help="write the solved table as JSON to PATH ('-' for stdout) instead of comparing it",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=1e-6,
        help="largest absolute difference from the shipped table that passes the comparison (default 1e-6)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    print(f"solving {len(GAUSSIAN_BITS) + len(BITS) * len(BETA_DIMS)} codebooks ...", file=sys.stderr, flush=True)
    table = build_table()
    if args.write == "-":
        sys.stdout.write(json.dumps(table, indent=1) + "\n")
        return 0
    if args.write:
        path = Path(args.write)
        path.write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {path}")
        return 0
    diff = table_difference(table, _shipped())
    ok = diff <= args.tolerance
    verdict = "matches" if ok else "DIFFERS from"
    print(f"solved table {verdict} the shipped one: largest difference {diff:.3g} (tolerance {args.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
