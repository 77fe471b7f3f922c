"""Environment switches read by tq-vllm (all optional; see docs/vllm.md).

| variable | effect |
|---|---|
| ``TQ_VLLM_DISABLE=1`` | register nothing: vLLM's own TurboQuant backend (cuda/xpu) or its CPU attention runs |
| ``TQ_VLLM_IMPL=auto|triton|core`` | backend: ``auto`` = tq-triton on cuda/xpu, tq-core on CPU |
| ``TQ_VLLM_IGNORE_VERSION=1`` | register even on a vLLM version outside ``SUPPORTED_VLLM`` |
| ``TQ_VLLM_STATS=PATH`` | each process writes its call counters as JSON to ``PATH.<pid>.json`` (below) |

With ``TQ_VLLM_STATS``, a process that counts anything writes its counters about once a
second while they change, so that a vLLM worker that is killed rather than exited still
leaves them, and again at a normal exit (``_stats``).

The on/off switches are read by :func:`tq_core.contract.env_flag`, tq's one parser of
them (``1/true/yes/on`` on, ``0/false/no/off`` or empty off, any other value a
``ValueError``). tq-core's ``TQ_DEBUG=1`` (metadata range checks in the fast kernels)
applies as well.
"""

from __future__ import annotations

import os

from tq_core.contract import env_flag

IMPL_CHOICES = ("auto", "triton", "core")


def disabled() -> bool:
    return env_flag("TQ_VLLM_DISABLE")


def ignore_version() -> bool:
    return env_flag("TQ_VLLM_IGNORE_VERSION")


def impl_choice() -> str:
    choice = os.environ.get("TQ_VLLM_IMPL", "auto").strip().lower() or "auto"
    if choice not in IMPL_CHOICES:
        raise ValueError(f"TQ_VLLM_IMPL={choice!r}: expected one of {IMPL_CHOICES}")
    return choice


def stats_path() -> str | None:
    return os.environ.get("TQ_VLLM_STATS") or None
