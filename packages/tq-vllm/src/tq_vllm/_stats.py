"""Call counters, so tests and users can check that tq-vllm's backend really ran.

Counters are per process. ``tq_vllm.stats()`` returns a snapshot; with
``TQ_VLLM_STATS=PATH`` every process that counts anything writes its snapshot to
``PATH.<pid>.json`` from a daemon thread, about once a second while the counts change,
and again at a normal exit (vLLM's worker processes are often killed rather than exited,
so the periodic write is what the multi-process engine leaves behind).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections import Counter
from typing import Any

from . import _env

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_maxima: dict[str, int] = {}
_layers: dict[str, set[str]] = {}
_writer: threading.Thread | None = None
_dirty = threading.Event()
DUMP_INTERVAL_S = 1.0


def bump(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n
    if _env.stats_path():
        _dirty.set()
        if _writer is None:
            _start_writer()


def _start_writer() -> None:
    global _writer
    with _lock:
        if _writer is not None:
            return
        _writer = threading.Thread(target=_write_loop, name="tq-vllm-stats", daemon=True)
        _writer.start()
    atexit.register(_dump)


def _write_loop() -> None:
    while True:
        _dirty.wait()
        time.sleep(DUMP_INTERVAL_S)
        _dirty.clear()
        _dump()


def note_max(key: str, value: int) -> None:
    with _lock:
        if value > _maxima.get(key, -1):
            _maxima[key] = value


def note_layer(kind: str, name: str | None) -> None:
    if name is None:
        return
    with _lock:
        _layers.setdefault(kind, set()).add(name)


def stats() -> dict[str, Any]:
    """A snapshot: ``{"counts": {...}, "max": {...}, "layers": {kind: sorted names}}``."""
    with _lock:
        return {
            "counts": dict(_counts),
            "max": dict(_maxima),
            "layers": {k: sorted(v) for k, v in _layers.items()},
        }


def reset_stats() -> None:
    with _lock:
        _counts.clear()
        _maxima.clear()
        _layers.clear()


def _dump() -> None:
    path = _env.stats_path()
    snap = stats()
    if not path or not snap["counts"]:
        return
    target = f"{path}.{os.getpid()}.json"
    tmp = target + ".tmp"
    with open(tmp, "w") as f:
        json.dump(snap, f, indent=1, sort_keys=True)
    os.replace(tmp, target)
