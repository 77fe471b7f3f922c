"""Repository-wide sessions: lint, build."""

from __future__ import annotations

import shutil

import nox

from ._util import PACKAGES, ROOT, install

DISTS = ("tq-core", "tq-triton", "tq-sycl", "tq-vllm")


@nox.session(tags=["tests"])
def lint(session: nox.Session) -> None:
    """ruff over the whole repository."""
    install(session, "ruff==0.17.6")
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", "--diff", str(ROOT))


@nox.session
def build(session: nox.Session) -> None:
    """Wheel + sdist of every package into dist/, metadata checked with twine."""
    install(session, "build", "twine")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for name in DISTS:
        session.run("python", "-m", "build", "--outdir", str(dist), str(PACKAGES / name))
    session.run("twine", "check", "--strict", *[str(p) for p in sorted(dist.iterdir())])
