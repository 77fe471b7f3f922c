"""tq-core sessions."""

from __future__ import annotations

import nox

from ._util import install_core, pkg, pytest


@nox.session(name="tests-core", tags=["tests"])
def tests_core(session: nox.Session) -> None:
    """tq-core's test suite on CPU torch."""
    install_core(session)
    pytest(session, pkg("tq-core") + "/tests")


@nox.session
def demo(session: nox.Session) -> None:
    """`tq demo`: accuracy and capacity of every preset on a synthetic cache."""
    install_core(session)
    session.run("tq", "demo", *session.posargs)
