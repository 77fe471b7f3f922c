"""The quick test selection (``TQ_TEST_QUICK=1``), for the suites' ``conftest.py``: per test
function, a greedy cover of its parametrised cases that keeps each value of each parameter
in at least one case (not their product). A ``parametrize`` that names several arguments
counts each row as one value (its rows are chosen combinations); parametrised fixtures
count one value each. Unparametrised tests always run."""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable

import pytest

QUICK_ENV = "TQ_TEST_QUICK"


def quick_enabled() -> bool:
    """Whether ``TQ_TEST_QUICK`` asks for the quick selection (set, and not ``0``)."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


def _param_groups(item: pytest.Item) -> list[tuple[str, ...]]:
    """The argument names of each ``parametrize`` on the test, one tuple per marker."""
    groups = []
    for mark in item.iter_markers(name="parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        groups.append(tuple(names))
    return groups


def case_values(item: pytest.Item) -> set[Hashable]:
    """The (argument names, values) pairs one parametrised case stands for; values compare by
    ``repr``, which holds for numbers, strings and tuples."""
    left = dict(item.callspec.params)  # type: ignore[attr-defined]
    out: set[Hashable] = set()
    for names in _param_groups(item):
        if names and all(n in left for n in names):
            out.add((names, tuple(repr(left.pop(n)) for n in names)))
    out.update(((n,), (repr(v),)) for n, v in left.items())
    return out


def cover(cases: list[set[Hashable]]) -> set[int]:
    """Indices of a greedy cover: repeatedly the case with the most values not yet covered
    (the first such in collection order), until every value is covered."""
    uncovered = set().union(*cases) if cases else set()
    keep: set[int] = set()
    while uncovered:
        best = max(range(len(cases)), key=lambda i: (len(cases[i] & uncovered), -i))
        keep.add(best)
        uncovered -= cases[best]
    return keep


def outside_cover(items: Iterable[pytest.Item]) -> set[int]:
    """``id()`` of each parametrised item that its test function's cover leaves out."""
    by_function: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        if getattr(item, "callspec", None) is not None:
            key = (str(item.path), getattr(item, "originalname", item.name))
            by_function.setdefault(key, []).append(item)
    dropped: set[int] = set()
    for cases in by_function.values():
        kept = cover([case_values(item) for item in cases])
        dropped.update(id(item) for i, item in enumerate(cases) if i not in kept)
    return dropped


def deselect(config: pytest.Config, items: list[pytest.Item], dropped: set[int]) -> None:
    """Remove the items whose ``id()`` is in ``dropped``, reported as deselected."""
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if id(item) in dropped])
        items[:] = [item for item in items if id(item) not in dropped]


def in_folder(items: Iterable[pytest.Item], conftest_file: str) -> list[pytest.Item]:
    """The items collected from the folder of ``conftest_file`` (its ``__file__``), so that one
    suite's selection leaves another's alone when several run in one process."""
    here = os.path.dirname(os.path.abspath(conftest_file)) + os.sep
    return [item for item in items if str(item.path).startswith(here)]
