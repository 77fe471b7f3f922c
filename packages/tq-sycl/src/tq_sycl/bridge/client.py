"""The parent side of the bridge: starts the child, moves tensors, enforces timeouts."""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from multiprocessing import shared_memory
from typing import IO, Any

import torch

from ..__about__ import __version__
from ..errors import BridgeCrashError, BridgeError, BridgeProtocolError, BridgeTimeoutError, BridgeVersionError
from ..kernel_args import PreparedCall
from . import protocol

START_TIMEOUT_ENV = "TQ_SYCL_BRIDGE_START_TIMEOUT"
REQUEST_TIMEOUT_ENV = "TQ_SYCL_BRIDGE_TIMEOUT"
DEFAULT_START_TIMEOUT = 120.0  # a JIT build of the kernels on first device use is slow
DEFAULT_REQUEST_TIMEOUT = 300.0


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected seconds as a number") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: expected a positive number of seconds")
    return value


def _cleanup(proc: subprocess.Popen | None, shm: list[shared_memory.SharedMemory]) -> None:
    # runs from weakref.finalize at garbage collection or interpreter exit
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    for seg in shm:
        seg.close()
        seg.unlink()
    shm.clear()


class Bridge:
    """A child process serving attention requests for one backend (``nightly`` or ``host``).

    ``argv`` and ``env`` replace the command and environment of the child (by default
    ``python -m tq_sycl.bridge.child --backend <backend>``, with the nightly's lib
    directory first on LD_LIBRARY_PATH for ``nightly``). Timeouts in seconds default to
    ``TQ_SYCL_BRIDGE_START_TIMEOUT`` / ``TQ_SYCL_BRIDGE_TIMEOUT``. After a timeout, a
    crash or a protocol error the child is gone and the bridge is closed for good.
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
        self.start_timeout = start_timeout or _env_seconds(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT)
        self.request_timeout = request_timeout or _env_seconds(REQUEST_TIMEOUT_ENV, DEFAULT_REQUEST_TIMEOUT)
        self.hello: dict[str, Any] = {}
        self.last_kernel_ms: float | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._buf = b""
        self._ids = itertools.count(1)
        self._shm: list[shared_memory.SharedMemory] = []  # at most one live segment
        self._closed = False
        self._finalizer: weakref.finalize | None = None

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
        """Asks the child to exit (kills it if it does not), frees the shared memory."""
        if self._closed:
            return
        try:
            if self.alive:
                self.request("shutdown", timeout=5.0)
        except BridgeError:
            pass
        self._abort()

    def _abort(self) -> None:
        self._closed = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        if self._proc is not None:
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
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

    def _crashed(self, what: str) -> None:
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
        raise BridgeCrashError(f"bridge child (pid {pid}, backend {self.backend}) {how} during {what!r}{tail}")

    def request(self, op: str, *, timeout: float | None = None, **payload: Any) -> dict[str, Any]:
        """Sends one request and returns the child's answer (``ok`` true)."""
        if self._closed or self._proc is None:
            raise BridgeError(
                f"bridge to the {self.backend} child is closed"
                + (" after an earlier failure; create a new Bridge" if self._closed else "; call start() first")
            )
        assert self._proc.stdin is not None
        rid = next(self._ids)
        try:
            self._proc.stdin.write(protocol.encode({"id": rid, "op": op, **payload}))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._crashed(op)
        line = self._read_line(op, timeout or self.request_timeout, REQUEST_TIMEOUT_ENV)
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
        if call.centroids is not None:
            arrays["centroids"] = call.centroids.to("cpu").contiguous()
        offsets: dict[str, int] = {}
        total = 0
        for name, t in arrays.items():
            offsets[name] = total
            total += protocol.align(t.numel() * t.element_size())
        seg = self._segment(total)
        buf = torch.frombuffer(seg.buf, dtype=torch.uint8)
        try:
            for name, t in arrays.items():
                n = t.numel() * t.element_size()
                if n:
                    buf[offsets[name] : offsets[name] + n].copy_(t.reshape(-1).view(torch.uint8))
            args = dict(call.args)
            for name in arrays:
                args[name] = {"shm_offset": offsets[name]}
            q, o = arrays["query"], arrays["out"]
            args.update(
                q_stride_token=q.stride(0),
                q_stride_head=q.stride(1),
                o_stride_token=o.stride(0),
                o_stride_head=o.stride(1),
                cache_block_stride=block_bytes,
                bt_stride=arrays["block_table"].stride(0),
            )
            reply = self.request("attention", shm=seg.name, shm_size=seg.size, args=args, kernel=kernel)
            n = o.numel() * o.element_size()
            result = buf[offsets["out"] : offsets["out"] + n].view(o.dtype).view(o.shape)
            call.out.copy_(result)
        finally:
            del buf  # releases the exported buffer so the segment can be closed later
        self.last_kernel_ms = reply.get("kernel_ms")
        return call.finish()
