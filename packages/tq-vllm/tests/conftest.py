"""Shared fixtures for tq-vllm's tests: fresh random inputs from a printed seed.

A failing test's captured output shows ``seed=N``; rerun with ``TQ_TEST_SEED=N``.
``devices`` covers CPU always, and cuda / xpu where present (the tq-triton path; such
machines need no vLLM for the planner and ops tests).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

torch.set_num_threads(min(2, torch.get_num_threads()))


def _devices() -> list[str]:
    devs = ["cpu"]
    if torch.cuda.is_available():
        devs.append("cuda")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        devs.append("xpu")
    return devs


@pytest.fixture
def seed() -> int:
    env = os.environ.get("TQ_TEST_SEED")
    s = int(env) if env else int.from_bytes(os.urandom(4), "little")
    print(f"seed={s} (rerun with TQ_TEST_SEED={s})")
    return s


@pytest.fixture
def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    dev = request.param
    if dev != "cpu" and importlib.util.find_spec("tq_triton") is None:
        pytest.skip(f"{dev}: tq-triton is not installed")
    return dev
