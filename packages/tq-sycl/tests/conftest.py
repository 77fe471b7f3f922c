"""Fresh random inputs per test: each test gets a generator seeded from os.urandom.

The seed is printed, so a failing test's captured output names it; rerun one case with
``TQ_SYCL_TEST_SEED=<seed>``.
"""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    seed = int(os.environ.get("TQ_SYCL_TEST_SEED") or int.from_bytes(os.urandom(8), "little") >> 1)
    print(f"{request.node.nodeid}: seed {seed} (TQ_SYCL_TEST_SEED={seed} reproduces)")
    return torch.Generator().manual_seed(seed)
