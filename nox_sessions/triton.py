"""tq-triton sessions."""

from __future__ import annotations

import os

import nox

from ._util import ROOT, TRITON, collect_selection, install, install_core, pkg, pytest, see_host_packages


def _interpreter_tests(session: nox.Session, *, quick: bool) -> None:
    install_core(session, TRITON)
    install(session, "-e", f"{pkg('tq-triton')}[test]")
    session.env["TRITON_INTERPRET"] = "1"
    session.env["TQ_TEST_DEVICE"] = "cpu"
    # TQ_TEST_QUICK: tests/conftest.py keeps a cover of each test's parametrised cases
    session.env["TQ_TEST_QUICK"] = "1" if quick else "0"
    # one worker per core (pytest-xdist): the interpreter runs one Python thread per test;
    # worksteal: a worker left idle takes queued tests from a busy one (a few take a minute)
    pytest(session, pkg("tq-triton") + "/tests", "-n", "auto", "--dist", "worksteal", "--durations=10")
    # the twin session's selection still collects
    collect_selection(session, pkg("tq-triton") + "/tests", quick=not quick)
    # docs/perf/scripts/static_loop.py, the static count of the attention loops (no GPU: it
    # compiles for sm_90), on one configuration of each kernel it counts, so that it keeps
    # working as the kernels change (a few seconds each)
    static_loop = str(ROOT / "docs" / "perf" / "scripts" / "static_loop.py")
    for args in (("--preset", "turboquant_k3v4_nc", "--block-kv", "32", "--warps", "1"), ("--gluon", "1")):
        session.run("python", static_loop, *args, "--top", "3", env={"TRITON_INTERPRET": "0"})


@nox.session(name="tests-triton", tags=["tests", "ci"])
def tests_triton(session: nox.Session) -> None:
    """tq-triton's suite on CPU through Triton's interpreter (small shapes), quick: per test,
    each value of each parameter in at least one case (``TQ_TEST_QUICK=1``)."""
    _interpreter_tests(session, quick=True)


@nox.session(name="tests-triton-full", tags=["full"])
def tests_triton_full(session: nox.Session) -> None:
    """tq-triton's suite on CPU through Triton's interpreter (small shapes), every case."""
    _interpreter_tests(session, quick=False)


@nox.session(name="tests-triton-gpu", venv_params=["--system-site-packages"])
def tests_triton_gpu(session: nox.Session) -> None:
    """The same suite at real sizes on this machine's GPU (cuda, or xpu with TQ_TEST_DEVICE=xpu).

    Uses the torch and Triton already installed for the GPU (the interpreter running nox)."""
    see_host_packages(session)
    install(session, "--no-deps", "-e", pkg("tq-core"), "-e", pkg("tq-triton"))
    session.env["TQ_TEST_DEVICE"] = os.environ.get("TQ_TEST_DEVICE", "cuda")
    session.env.pop("TRITON_INTERPRET", None)
    pytest(session, pkg("tq-triton") + "/tests")


@nox.session(venv_params=["--system-site-packages"])
def bench(session: nox.Session) -> None:
    """`tq bench`: every named shape and format (needs a GPU; uses the GPU torch of the interpreter running nox)."""
    see_host_packages(session)
    install(session, "--no-deps", "-e", pkg("tq-core"), "-e", pkg("tq-triton"))
    session.run("tq", "bench", *session.posargs)
