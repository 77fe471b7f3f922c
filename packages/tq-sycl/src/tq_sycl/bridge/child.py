"""The bridge child: ``python -m tq_sycl.bridge.child --backend nightly|host``.

Imports only the standard library and one compiled tq_sycl module (never torch), maps
the parent's shared memory, and serves JSON-line requests on stdin/stdout until EOF or
``shutdown``. The ``host`` backend runs ``tq_sycl._host`` and exists so that the bridge
is tested end to end on machines without a SYCL toolchain.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import sys
import time
from collections.abc import Iterable
from typing import Any, BinaryIO

from ..__about__ import __version__
from . import protocol

BACKENDS = {"host": "tq_sycl._host", "nightly": "tq_sycl._nightly"}


class Segment:
    """The parent's current shared-memory segment, mapped once and reused across requests."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.size = 0
        self._map = None
        self._anchor: ctypes.c_char | None = None
        self.base = 0

    def attach(self, name: str, size: int) -> int:
        if name != self.name or size > self.size:
            self.close()
            self._map = protocol.map_segment(name, size)
            self._anchor = ctypes.c_char.from_buffer(self._map)
            self.base = ctypes.addressof(self._anchor)
            self.name, self.size = name, size
        return self.base

    def close(self) -> None:
        self._anchor = None  # must go before the map closes (exported buffer)
        if self._map is not None:
            self._map.close()
        self._map, self.name, self.size, self.base = None, None, 0, 0


def _resolve_pointers(args: dict[str, Any], base: int, size: int) -> dict[str, Any]:
    out = dict(args)
    for key in protocol.POINTER_FIELDS:
        ref = out.get(key)
        if isinstance(ref, dict):
            off = int(ref["shm_offset"])
            if not 0 <= off < size:
                raise ValueError(f"args[{key!r}]: shm_offset {off} outside the {size}-byte segment")
            out[key] = base + off
    return out


def serve(mod: Any, backend: str, inp: Iterable[bytes], out: BinaryIO) -> int:
    """Answers the requests read from ``inp`` (one JSON line each) on ``out`` until EOF or shutdown."""
    segment = Segment()
    for line in inp:
        if not line.strip():
            continue
        req: dict[str, Any] = {}
        try:
            req = protocol.decode(line)
            op = req.get("op")
            reply: dict[str, Any] = {"id": req.get("id"), "ok": True}
            if op == "attention":
                base = segment.attach(req["shm"], int(req["shm_size"]))
                args = _resolve_pointers(req["args"], base, segment.size)
                kernel = req.get("kernel", "host")
                t0 = time.perf_counter()
                if backend == "host":
                    if kernel != "host":
                        raise ValueError(f"kernel={kernel!r}: the host child only has 'host'")
                    mod.attention(args)
                    reply["kernel_ms"] = (time.perf_counter() - t0) * 1e3
                else:
                    reply["kernel_ms"] = mod.attention_host(args, kernel)
                reply["wall_ms"] = (time.perf_counter() - t0) * 1e3
            elif op == "status":
                reply["torch_loaded"] = "torch" in sys.modules
                reply["segment"] = segment.name
            elif op == "shutdown":
                out.write(protocol.encode(reply))
                out.flush()
                segment.close()
                return 0
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as exc:  # every failure becomes an answer; the child keeps serving
            reply = {"id": req.get("id"), "ok": False, "error": type(exc).__name__, "message": str(exc)}
        out.write(protocol.encode(reply))
        out.flush()
    segment.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tq_sycl.bridge.child")
    parser.add_argument("--backend", choices=sorted(BACKENDS), required=True)
    ns = parser.parse_args(argv)
    # fd 1 carries only the protocol: anything a library prints goes to stderr instead
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    hello: dict[str, Any] = {
        "type": "hello",
        "protocol": protocol.PROTOCOL_VERSION,
        "version": __version__,
        "backend": ns.backend,
        "pid": os.getpid(),
    }
    try:
        mod = importlib.import_module(BACKENDS[ns.backend])
        hello["module_version"] = mod.version()
        hello["kernels"] = list(mod.kernels())
        hello["device"] = mod.device_name() if hasattr(mod, "device_name") else "cpu"
    except Exception as exc:
        hello["error"] = f"{type(exc).__name__}: {exc}"
        proto_out.write(protocol.encode(hello))
        proto_out.flush()
        return 1
    proto_out.write(protocol.encode(hello))
    proto_out.flush()
    return serve(mod, ns.backend, sys.stdin.buffer, proto_out)


if __name__ == "__main__":
    sys.exit(main())
