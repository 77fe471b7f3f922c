"""The bridge's wire format, shared by parent and child (standard library only).

One JSON object per line. The child speaks first::

    {"type": "hello", "protocol": 1, "version": "0.1.0", "module_version": "0.1.0",
     "backend": "nightly", "kernels": ["scalar", "jm"], "device": "...", "pid": 123}

then answers each request ``{"id": n, "op": ..., ...}`` with ``{"id": n, "ok": true, ...}``
or ``{"id": n, "ok": false, "error": "<exception type>", "message": "..."}``. In an
``attention`` request, pointer fields of ``args`` are ``{"shm_offset": k}``: byte offsets
into the shared-memory segment named by ``shm``.
"""

from __future__ import annotations

import json
import mmap
import os
from typing import Any

PROTOCOL_VERSION = 1
# The argument-dict fields that hold addresses (csrc/bindings/params_from_dict.hpp).
POINTER_FIELDS = ("query", "out", "cache", "block_table", "seq_lens", "query_start_loc", "centroids")
# Arrays in the segment start on this boundary (the kernels' widest aligned load is 64 B).
SHM_ALIGN = 64
SHM_DIR = "/dev/shm"


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    msg = json.loads(line)
    if not isinstance(msg, dict):
        raise ValueError(f"expected a JSON object, got {type(msg).__name__}")
    return msg


def align(n: int) -> int:
    return (n + SHM_ALIGN - 1) // SHM_ALIGN * SHM_ALIGN


def map_segment(name: str, size: int) -> mmap.mmap:
    """Maps the parent's segment by name without multiprocessing's resource tracker.

    (Attaching through ``SharedMemory`` on Python < 3.13 registers the segment with the
    child's tracker, which unlinks it when the child exits: the parent owns it.)
    """
    if "/" in name or not name:
        raise ValueError(f"shm name {name!r}: expected a plain POSIX shared-memory name")
    fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
