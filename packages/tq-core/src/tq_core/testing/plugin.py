"""pytest plugin of tq's test suites: ``pytest_plugins = ["tq_core.testing.plugin"]``.

- ``seed``: a fresh seed per test from ``os.urandom``, printed, so a failing test's captured
  output names it; ``TQ_TEST_SEED=N`` replays it.
- ``gen``: a CPU ``torch.Generator`` seeded with ``seed`` (draw on the CPU, then move: the
  same seed gives the same inputs on every machine).
- hypothesis, when installed, runs the ``tq`` profile (20 examples, no deadline);
  ``TQ_HYPOTHESIS_PROFILE=thorough`` raises it to 300.
"""

from __future__ import annotations

import os

import pytest
import torch

try:
    from hypothesis import HealthCheck, settings
except ModuleNotFoundError:  # hypothesis is a test extra; suites without it lose nothing else
    settings = None
else:
    settings.register_profile(
        "tq", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
    )
    settings.register_profile("thorough", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("TQ_HYPOTHESIS_PROFILE", "tq"))


def test_seed() -> int:
    """The seed a test uses: ``TQ_TEST_SEED`` when set, else fresh from ``os.urandom``."""
    env = os.environ.get("TQ_TEST_SEED")
    if env:
        try:
            return int(env)
        except ValueError:
            raise pytest.UsageError(f"TQ_TEST_SEED={env!r}: expected an integer") from None
    return int.from_bytes(os.urandom(4), "little")


test_seed.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@pytest.fixture
def seed() -> int:
    s = test_seed()
    print(f"seed={s} (rerun with TQ_TEST_SEED={s})")
    return s


@pytest.fixture
def gen(seed: int) -> torch.Generator:
    """A CPU torch.Generator seeded from :func:`seed`."""
    return torch.Generator().manual_seed(seed)
