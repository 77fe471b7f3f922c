"""The parent side of the bridge: starts the child, moves tensors, enforces timeouts."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from multiprocessing import shared_memory
from typing import IO, Any, NoReturn

import torch

from tq_core.errors import RangeError

from ..__about__ import __version__
from ..errors import BridgeCrashError, BridgeError, BridgeProtocolError, BridgeTimeoutError, BridgeVersionError
from ..kernel_args import PreparedCall
from . import protocol

START_TIMEOUT_ENV = "TQ_SYCL_BRIDGE_START_TIMEOUT"
REQUEST_TIMEOUT_ENV = "TQ_SYCL_BRIDGE_TIMEOUT"
DEFAULT_START_TIMEOUT = 120.0  # a JIT build of the kernels on first device use is slow
DEFAULT_REQUEST_TIMEOUT = 300.0


def check_seconds(name: str, value: object) -> float:
    """``value`` as a timeout in seconds: a finite number > 0, else ``RangeError``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RangeError(f"{name}={value!r}: expected a finite number of seconds > 0")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise RangeError(f"{name}={value!r}: expected a finite number of seconds > 0")
    return seconds


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise RangeError(f"{name}={raw!r}: expected a finite number of seconds > 0")
    return value


def _timeout(name: str, value: float | None, env_name: str, default: float) -> float:
    """An explicit timeout (checked), else the environment's, else the default."""
    return _env_seconds(env_name, default) if value is None else check_seconds(name, value)


def _cleanup(proc: subprocess.Popen | None, shm: list[shared_memory.SharedMemory]) -> None:
    # runs from Bridge._abort, and from weakref.finalize at garbage collection or exit
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    for seg in shm:
        with contextlib.suppress(FileNotFoundError):
            seg.unlink()  # the name goes now, whatever still maps the segment
        # BufferError: a tensor still views the mapping; it is unmapped when that view goes
        with contextlib.suppress(BufferError):
            seg.close()
    shm.clear()


class Bridge:
    """A child process serving attention requests for one backend (``nightly`` or ``host``).

    ``argv`` and ``env`` replace the command and environment of the child (by default
    ``python -m tq_sycl.bridge.child --backend <backend>``, with the nightly's lib
    directory first on LD_LIBRARY_PATH for ``nightly``). Timeouts are in seconds, finite
    and > 0 (``RangeError`` otherwise); ``None`` takes ``TQ_SYCL_BRIDGE_START_TIMEOUT`` /
    ``TQ_SYCL_BRIDGE_TIMEOUT``, else 120 s to start (a first JIT build is slow) and 300 s
    per request. After a timeout, a crash or a protocol error the child is gone and the
    bridge is closed for good: later requests raise ``BridgeError``.

    One bridge may serve several threads: a lock serialises each request/response
    exchange together with its use of the shared-memory segment, so requests run one at
    a time in the child. ``close()`` frees the segment and the child's stderr file, also
    when the child has died.
    """

    def __init__(
        self,
        backend: str = "nightly",
        *,
        argv: list[str] | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float | None = None,
        request_timeout: float | None = None,
    ) -> None:
        if backend not in ("nightly", "host"):
            raise ValueError(f"backend={backend!r}: expected 'nightly' or 'host'")
        self.backend = backend
        self.argv = (
            list(argv) if argv is not None else [sys.executable, "-m", "tq_sycl.bridge.child", "--backend", backend]
        )
        if env is None:
            from .. import toolchain

            env = toolchain.nightly_env() if backend == "nightly" else dict(os.environ)
        self.env = env
        self.start_timeout = _timeout("start_timeout", start_timeout, START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT)
        self.request_timeout = _timeout(
            "request_timeout", request_timeout, REQUEST_TIMEOUT_ENV, DEFAULT_REQUEST_TIMEOUT
        )
        self.hello: dict[str, Any] = {}
        self.last_kernel_ms: float | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._buf = b""
        self._ids = itertools.count(1)
        self._shm: list[shared_memory.SharedMemory] = []  # at most one live segment
        self._closed = False
        self._finalizer: weakref.finalize | None = None
        # held for a whole exchange (write, read, shared-memory use); re-entrant because
        # attention() and close() call request()
        self._lock = threading.RLock()

    # lifecycle ----------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def kernels(self) -> list[str]:
        return list(self.hello.get("kernels", []))

    def start(self) -> dict[str, Any]:
        """Starts the child and checks its hello; returns the hello."""
        with self._lock:
            return self._start()

    def _start(self) -> dict[str, Any]:
        if self._proc is not None:
            raise BridgeError("bridge already started")
        # kept open for the child's whole life (its stderr); closed with the bridge
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=self.env,
                close_fds=True,
            )
        except OSError as exc:
            self._closed = True
            raise BridgeError(f"could not start the bridge child {self.argv}: {exc}") from exc
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, self._shm)
        line = self._read_line("hello", self.start_timeout, START_TIMEOUT_ENV)
        try:
            hello = protocol.decode(line)
        except ValueError as exc:
            self._abort()
            raise BridgeProtocolError(
                f"bridge child (pid {self.pid}) did not start with a JSON hello: {line[:200]!r} ({exc})"
            ) from exc
        self._check_hello(hello)
        self.hello = hello
        return hello

    def _check_hello(self, hello: dict[str, Any]) -> None:
        who = f"bridge child (pid {self.pid}, backend {self.backend})"
        if hello.get("type") != "hello":
            self._abort()
            raise BridgeProtocolError(f"{who}: first message is not a hello: {hello}")
        if "error" in hello:
            tail = self._stderr_tail()
            self._abort()
            raise BridgeError(f"{who} could not load its SYCL module: {hello['error']}{tail}")
        problems = []
        if hello.get("protocol") != protocol.PROTOCOL_VERSION:
            problems.append(f"protocol {hello.get('protocol')} (parent speaks {protocol.PROTOCOL_VERSION})")
        if hello.get("version") != __version__:
            problems.append(f"tq_sycl {hello.get('version')} (parent has {__version__})")
        if hello.get("module_version") != __version__:
            problems.append(f"compiled module from tq-sycl {hello.get('module_version')} (parent has {__version__})")
        if problems:
            self._abort()
            raise BridgeVersionError(
                f"{who} does not match this process: " + "; ".join(problems) + ". Reinstall tq-sycl so that the "
                "child's Python package and compiled module come from the same version (nox -s sycl_nightly rebuilds)"
            )

    def close(self) -> None:
        """Asks the child to exit (kills it if it does not); frees the shared memory and the
        child's stderr file, also when the child is already dead. Idempotent."""
        with self._lock:
            try:
                if self.alive:
                    self._request("shutdown", timeout=5.0)
            except BridgeError:
                pass  # the child is gone either way; _abort releases what is left
            self._abort()

    def _abort(self) -> None:
        """Kills the child if it runs and releases everything; never raises for a dead child."""
        self._closed = True
        proc = self._proc
        try:
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                for pipe in (proc.stdin, proc.stdout):
                    if pipe is not None:
                        # BrokenPipeError: bytes left unflushed for a dead child
                        with contextlib.suppress(OSError):
                            pipe.close()
        finally:
            _cleanup(None, self._shm)
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
            if self._finalizer is not None:
                self._finalizer.detach()

    def __enter__(self) -> Bridge:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # transport ----------------------------------------------------------------------

    def _stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit))
            tail = self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return f"\n--- child stderr (last {limit} bytes) ---\n{tail}" if tail else " (child stderr was empty)"

    def _read_line(self, what: str, timeout: float, env_name: str) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                pid = self.pid
                tail = self._stderr_tail()
                self._abort()
                raise BridgeTimeoutError(
                    f"bridge child (pid {pid}, backend {self.backend}) gave no answer to {what!r} within "
                    f"{timeout:g} s and was killed; raise the limit with {env_name} or the Bridge's "
                    f"{'start_timeout' if env_name == START_TIMEOUT_ENV else 'request_timeout'}" + tail
                )
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._crashed(what)
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _crashed(self, what: str, when: str = "during") -> NoReturn:
        assert self._proc is not None
        pid = self.pid
        try:
            rc = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is None:
            how = "closed its stdout but did not exit"
        elif rc < 0:
            try:
                how = f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        else:
            how = f"exited with status {rc}"
        tail = self._stderr_tail()
        self._abort()
        raise BridgeCrashError(f"bridge child (pid {pid}, backend {self.backend}) {how} {when} {what!r}{tail}")

    def request(self, op: str, *, timeout: float | None = None, **payload: Any) -> dict[str, Any]:
        """Sends one request and returns the child's answer (``ok`` true).

        ``timeout`` (seconds, finite and > 0) replaces ``request_timeout`` for this request.
        """
        limit = self.request_timeout if timeout is None else check_seconds("timeout", timeout)
        with self._lock:
            return self._request(op, timeout=limit, **payload)

    def _request(self, op: str, *, timeout: float, **payload: Any) -> dict[str, Any]:
        if self._closed or self._proc is None:
            raise BridgeError(
                f"bridge to the {self.backend} child is closed"
                + (" after an earlier failure; create a new Bridge" if self._closed else "; call start() first")
            )
        assert self._proc.stdin is not None
        if self._proc.poll() is not None:
            self._crashed(op, "before")  # died between requests
        rid = next(self._ids)
        try:
            self._proc.stdin.write(protocol.encode({"id": rid, "op": op, **payload}))
            self._proc.stdin.flush()
        except OSError:  # BrokenPipeError: the child died after the check above
            self._crashed(op)
        line = self._read_line(op, timeout, REQUEST_TIMEOUT_ENV)
        try:
            reply = protocol.decode(line)
        except ValueError as exc:
            self._abort()
            raise BridgeProtocolError(f"bridge child answered {op!r} with non-JSON: {line[:200]!r}") from exc
        if reply.get("id") != rid:
            self._abort()
            raise BridgeProtocolError(f"bridge child answered request {reply.get('id')!r}, expected {rid}")
        if not reply.get("ok"):
            raise BridgeError(
                f"bridge child (backend {self.backend}) failed {op!r}: {reply.get('error')}: {reply.get('message')}"
            )
        return reply

    def _segment(self, size: int) -> shared_memory.SharedMemory:
        if self._shm and self._shm[0].size >= size:
            return self._shm[0]
        _cleanup(None, self._shm)
        seg = shared_memory.SharedMemory(create=True, size=max(size, protocol.SHM_ALIGN))
        self._shm.append(seg)
        return seg

    # attention ----------------------------------------------------------------------

    def attention(self, call: PreparedCall, kernel: str) -> torch.Tensor:
        """Runs a prepared call in the child; copies the result into ``call.out``."""
        with self._lock:  # the segment is shared by every call of this bridge
            return self._attention(call, kernel)

    def _attention(self, call: PreparedCall, kernel: str) -> torch.Tensor:
        block_bytes = call.checked.fields.block_bytes
        nb = call.kv_cache.shape[0]
        # host copies the child can address; the cache compacted to dense blocks
        blocks = torch.as_strided(call.kv_cache, (nb, block_bytes), (call.kv_cache.stride(0), 1))
        arrays: dict[str, torch.Tensor] = {
            "query": call.query.detach().to("cpu").contiguous(),
            "out": call.out.detach().to("cpu").contiguous(),  # keeps rows the kernel does not write
            "cache": blocks.to("cpu").contiguous(),
            "block_table": call.block_table.to("cpu").contiguous(),
            "seq_lens": call.seq_lens.to("cpu").contiguous(),
            "query_start_loc": call.query_start_loc.to("cpu").contiguous(),
        }
        if call._centroids is not None:
            arrays["centroids"] = call._centroids.to("cpu").contiguous()
        offsets: dict[str, int] = {}
        total = 0
        for name, t in arrays.items():
            offsets[name] = total
            total += protocol.align(t.numel() * t.element_size())
        seg = self._segment(total)
        # no tensor views the segment while the child runs, so a failed request can unmap it
        buf = torch.frombuffer(seg.buf, dtype=torch.uint8)
        try:
            for name, t in arrays.items():
                n = t.numel() * t.element_size()
                if n:
                    buf[offsets[name] : offsets[name] + n].copy_(t.reshape(-1).view(torch.uint8))
        finally:
            del buf  # releases the exported buffer so the segment can be closed
        args = dict(call.args)
        for name in arrays:
            args[name] = {"shm_offset": offsets[name]}
        q, o = arrays["query"], arrays["out"]
        # the segment holds each array packed: row strides of the packed layout
        args.update(
            q_stride_token=q.shape[1] * q.shape[2],
            q_stride_head=q.shape[2],
            o_stride_token=o.shape[1] * o.shape[2],
            o_stride_head=o.shape[2],
            cache_block_stride=block_bytes,
            bt_stride=arrays["block_table"].shape[1],
        )
        reply = self._request(
            "attention", timeout=self.request_timeout, shm=seg.name, shm_size=seg.size, args=args, kernel=kernel
        )
        n = o.numel() * o.element_size()
        buf = torch.frombuffer(seg.buf, dtype=torch.uint8)
        try:
            call.out.copy_(buf[offsets["out"] : offsets["out"] + n].view(o.dtype).view(o.shape))
        finally:
            del buf
        self.last_kernel_ms = reply.get("kernel_ms")
        return call.finish()
