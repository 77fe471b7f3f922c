"""Test setup: real GPU when TQ_TEST_DEVICE names one, else Triton's interpreter on CPU.

The interpreter must be switched on before triton is imported, so this runs first.
Sizes scale with the device: small under the interpreter (CI), real on a GPU.
"""

from __future__ import annotations

import os

import pytest

DEVICE = os.environ.get("TQ_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402


@pytest.fixture
def device() -> torch.device:
    return torch.device(DEVICE)


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A fresh seed per test, printed so that a failure can be replayed with TQ_TEST_SEED."""
    s = int(os.environ.get("TQ_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"seed={s} (rerun with TQ_TEST_SEED={s})")
    return s
