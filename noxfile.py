"""Sessions for every tq package. `nox -t tests`: the quick tests; `nox -t ci`: what CI runs;
`nox -t full`: every test.

`nox -s demo` runs the demo. `nox -s tests-served` runs the served-model tests (tags `served`,
`ci` and `full`: a real model behind vLLM's OpenAI server, 20 to 28 minutes on 2 cores).
The quick sessions (tests-triton, tests-vllm, xpu_compile) run a cover of the parametrised cases
and compiles; their `-full` twins run all of them. `ci` is the quick sessions plus
`tests-served`; the other test sessions carry every tag.

Each package's sessions live in ``nox_sessions/<package>.py`` so that they can evolve
independently; importing them registers the sessions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))

nox.options.error_on_missing_interpreters = False
# uv where it is installed (`pip install "nox[uv]"`): its cache hard-links packages into each
# session's environment, so four copies of torch cost the disk one and install in seconds.
# Machines without uv (the lent GPU machine) fall back to virtualenv + pip.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests-core"]

from nox_sessions import common, core, served, sycl, triton, vllm, xpu  # noqa: E402, F401
