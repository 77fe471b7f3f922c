"""A progress indicator for long device runs: rich when installed, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], total: int, label: str) -> Iterator[T]:
    try:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    except ImportError:
        start = time.time()
        for i, item in enumerate(items):
            print(f"[{label}] {i + 1}/{total} ({time.time() - start:.0f}s)", file=sys.stderr, flush=True)
            yield item
        return
    cols = (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*cols, transient=False, console=None) as bar:
        task = bar.add_task(label, total=total)
        for item in items:
            yield item
            bar.advance(task)
