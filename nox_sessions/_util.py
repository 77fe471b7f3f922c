"""Shared bits for the nox session modules."""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"

# CPU torch for tests; GPU machines bring their own torch and never run these installs.
TORCH_CPU = "torch==2.13.0"
TRITON = "triton==3.9.0"


def pkg(name: str) -> str:
    return str(PACKAGES / name)


def install_core(session: nox.Session, *extra: str) -> None:
    session.install(TORCH_CPU, *extra)
    session.install("-e", f"{pkg('tq-core')}[test]")


def pytest(session: nox.Session, path: str, *args: str) -> None:
    session.run("python", "-m", "pytest", path, "-ra", "-q", "-p", "no:cacheprovider", *args, *session.posargs)
