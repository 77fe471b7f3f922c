"""Call counters, so tests and users can check that tq-vllm's backend really ran.

Counters are per process. ``tq_vllm.stats()`` returns a snapshot; with
``TQ_VLLM_STATS=PATH`` every process that counted anything writes its snapshot to
``PATH.<pid>.json`` at exit (useful with vLLM's multi-process engine).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections import Counter
from typing import Any

from . import _env

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_maxima: dict[str, int] = {}
_layers: dict[str, set[str]] = {}
_atexit_registered = False


def _ensure_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered and _env.stats_path():
        atexit.register(_dump)
        _atexit_registered = True


def bump(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n
        _ensure_atexit()


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
    with open(f"{path}.{os.getpid()}.json", "w") as f:
        json.dump(snap, f, indent=1, sort_keys=True)
