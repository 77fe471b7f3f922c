"""Shared fixtures for tq-vllm's tests.

``seed`` / ``gen`` come from tq-core's test kit plugin: a fresh seed per test, printed, so
a failing test's captured output shows ``seed=N``; rerun with ``TQ_TEST_SEED=N``.
``device`` covers CPU always, and cuda / xpu where present (the tq-triton path; such
machines need no vLLM for the planner and ops tests).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytest_plugins = ["tq_core.testing.plugin"]

torch.set_num_threads(min(2, torch.get_num_threads()))


def _devices() -> list[str]:
    devs = ["cpu"]
    if torch.cuda.is_available():
        devs.append("cuda")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        devs.append("xpu")
    return devs


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    dev = request.param
    if dev != "cpu" and importlib.util.find_spec("tq_triton") is None:
        pytest.skip(f"{dev}: tq-triton is not installed")
    return dev
