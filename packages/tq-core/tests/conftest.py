"""tq-core's fixtures: the shared kit's ``seed`` / ``gen`` and hypothesis profiles, plus fake entry points.

A failing test's captured output shows ``seed=N``; rerun with ``TQ_TEST_SEED=N`` to get
the same inputs (see :mod:`tq_core.testing.plugin`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib import metadata

import pytest
import torch
from tqc_helpers import FakeEntryPoint

from tq_core import contract

pytest_plugins = ["tq_core.testing.plugin"]

torch.set_num_threads(min(2, torch.get_num_threads()))


def _clear_registry_caches() -> None:
    contract.backend_names.cache_clear()
    contract.load_backend.cache_clear()


@pytest.fixture
def entry_points(monkeypatch) -> Iterator[Callable[[str, list[FakeEntryPoint]], None]]:
    """``entry_points(group, fakes)``: ``importlib.metadata.entry_points(group=group)`` returns ``fakes``.

    Other groups still answer from the installed metadata; the backend registry's caches are
    cleared before and after, so no fake outlives the test.
    """
    real = metadata.entry_points
    fakes: dict[str, list[FakeEntryPoint]] = {}

    def fake(**kwargs):
        group = kwargs.get("group")
        return list(fakes[group]) if group in fakes else real(**kwargs)

    def install(group: str, eps: list[FakeEntryPoint]) -> None:
        fakes[group] = eps
        _clear_registry_caches()

    monkeypatch.setattr(metadata, "entry_points", fake)
    _clear_registry_caches()
    yield install
    _clear_registry_caches()
