"""Shared fixtures: every test draws fresh random inputs from a seed it prints.

A failing test's captured output shows ``seed=N``; rerun with ``TQ_TEST_SEED=N`` to get
the same inputs. Hypothesis runs with a small example budget so the suite stays fast
(``TQ_HYPOTHESIS_PROFILE=thorough`` raises it).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "tq", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("thorough", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("TQ_HYPOTHESIS_PROFILE", "tq"))

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def seed() -> int:
    env = os.environ.get("TQ_TEST_SEED")
    s = int(env) if env else int.from_bytes(os.urandom(4), "little")
    print(f"seed={s} (rerun with TQ_TEST_SEED={s})")
    return s


@pytest.fixture
def gen(seed: int) -> torch.Generator:
    """A torch.Generator seeded from :func:`seed`."""
    return torch.Generator().manual_seed(seed)
