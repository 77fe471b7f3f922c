"""argparse types shared by the tq subcommands.

Each one rejects a bad value while the command line is parsed, so that argparse prints
the usage and the problem and exits 2 before a command touches a device. Comma lists
("a,b,c") come back as Python lists; argparse also converts string defaults through them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from ..errors import PresetError
from ..presets import CALIBRATED_PRESETS, PRESETS, get_preset


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An integer >= ``minimum``."""

    def parse(text: str) -> int:
        value = _int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is too small: expected an integer >= {minimum}")
        return value

    parse.__name__ = f"int>={minimum}"
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def _items(text: str) -> list[str]:
    items = [x.strip() for x in text.split(",")]
    if not items or any(not x for x in items):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list without empty items")
    return items


def int_list(minimum: int = 0, choices: Iterable[int] | None = None) -> Callable[[str], list[int]]:
    """A comma list of integers, each >= ``minimum`` (and in ``choices`` when given)."""
    allowed = None if choices is None else sorted(choices)
    one = int_at_least(minimum)

    def parse(text: str) -> list[int]:
        values = [one(x) for x in _items(text)]
        bad = [v for v in values if allowed is not None and v not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]} is not allowed: expected values from {allowed}")
        return values

    parse.__name__ = "int list"
    return parse


def choice_list(choices: Iterable[str], what: str = "value") -> Callable[[str], list[str]]:
    """A comma list of names, each one of ``choices``."""
    allowed = list(choices)

    def parse(text: str) -> list[str]:
        items = _items(text)
        for x in items:
            if x not in allowed:
                raise argparse.ArgumentTypeError(f"unknown {what} {x!r}: expected one of {', '.join(allowed)}")
        return items

    parse.__name__ = f"{what} list"
    return parse


def preset(text: str) -> str:
    """A cache format's name: one of vLLM's four presets or tq's calibrated formats."""
    try:
        return get_preset(text.strip()).name
    except PresetError:
        names = ", ".join([*PRESETS, *CALIBRATED_PRESETS])
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}: expected one of {names}") from None


def preset_list(text: str) -> list[str]:
    """A comma list of preset names, or 'all'."""
    if text.strip() == "all":
        return list(PRESETS)
    return [preset(x) for x in _items(text)]


__all__ = [
    "choice_list",
    "int_at_least",
    "int_list",
    "nonnegative_int",
    "positive_float",
    "positive_int",
    "preset",
    "preset_list",
]
