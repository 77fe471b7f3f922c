"""The subprocess bridge with a real child process: the host build serves as the child."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest
import torch
from cases import make_case, prepared

import tq_core
from tq_core.errors import RangeError
from tq_core.testing import PagedBatch, assert_attention_close
from tq_sycl.bridge import protocol
from tq_sycl.bridge.client import DEFAULT_REQUEST_TIMEOUT, DEFAULT_START_TIMEOUT, Bridge
from tq_sycl.errors import (
    BridgeCrashError,
    BridgeError,
    BridgeProtocolError,
    BridgeTimeoutError,
    BridgeVersionError,
)

# the shipped child plus a "fault" op and a --claim-version switch (tests only)
FAULT_CHILD = [sys.executable, str(Path(__file__).with_name("bridge_fault_child.py"))]
HOST = ["--backend", "host"]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def bridge():
    with Bridge("host", argv=[*FAULT_CHILD, *HOST], request_timeout=60) as b:
        yield b


@pytest.mark.parametrize("preset", sorted(tq_core.PRESETS))
def test_round_trip_matches_tq_core(gen, bridge, preset):
    case = make_case(gen, preset, seq_lens=[33, 5], q_lens=[4, 1], dtype=torch.float16)
    out = torch.full_like(case.query, float("nan"))
    call = prepared(case, out, 3)
    got = bridge.attention(call, "host")
    assert got is out
    # float16 in and out: both sides round float32 results to float16 once
    assert_attention_close(got, case.reference(), tol=2e-3)
    assert bridge.last_kernel_ms is not None and bridge.last_kernel_ms >= 0


def test_child_never_loads_torch(bridge, gen):
    case = make_case(gen, "turboquant_k8v4", seq_lens=[9], q_lens=[1])
    bridge.attention(prepared(case), "host")
    assert bridge.request("status")["torch_loaded"] is False


def test_shared_memory_is_reused_and_freed(gen):
    b = Bridge("host")
    b.start()
    case = make_case(gen, "turboquant_4bit_nc", seq_lens=[20], q_lens=[2])
    b.attention(prepared(case), "host")
    name = b.request("status")["segment"]
    b.attention(prepared(case, None, 2), "host")
    assert b.request("status")["segment"] == name
    assert os.path.exists(os.path.join(protocol.SHM_DIR, name))
    pid = b.pid
    b.close()
    assert not os.path.exists(os.path.join(protocol.SHM_DIR, name))
    assert not pid_alive(pid)


def test_child_errors_are_reported_and_the_child_keeps_serving(bridge):
    with pytest.raises(BridgeError, match="unknown op 'nope'"):
        bridge.request("nope")
    with pytest.raises(BridgeError, match="shm name '': expected a plain POSIX shared-memory name"):
        bridge.request("attention", shm="", shm_size=0, args={}, kernel="host")
    assert bridge.alive
    assert bridge.request("status")["ok"] is True


def test_the_shipped_child_has_no_fault_op():
    with Bridge("host", request_timeout=60) as b:
        with pytest.raises(BridgeError, match="unknown op 'fault'"):
            b.request("fault", mode="crash")
        assert b.alive


def test_child_that_crashes(bridge):
    pid = bridge.pid
    with pytest.raises(BridgeCrashError, match=r"killed by SIGSEGV during 'fault'"):
        bridge.request("fault", mode="crash")
    assert not bridge.alive and not pid_alive(pid)
    with pytest.raises(BridgeError, match="closed after an earlier failure"):
        bridge.request("status")


def test_child_that_exits_during_a_request(bridge):
    with pytest.raises(BridgeCrashError, match="exited with status 3"):
        bridge.request("fault", mode="exit")


def test_child_that_hangs_is_killed_after_the_timeout():
    b = Bridge("host", argv=[*FAULT_CHILD, *HOST], request_timeout=1.5)
    b.start()
    pid = b.pid
    t0 = time.monotonic()
    with pytest.raises(
        BridgeTimeoutError, match=r"no answer to 'fault' within 1.5 s and was killed.*TQ_SYCL_BRIDGE_TIMEOUT"
    ):
        b.request("fault", mode="hang")
    assert time.monotonic() - t0 < 10
    assert not pid_alive(pid)


def test_child_that_hangs_before_its_hello():
    script = "import sys, time; sys.stderr.write('JIT-compiling kernels\\n'); sys.stderr.flush(); time.sleep(60)"
    b = Bridge("host", argv=[sys.executable, "-c", script], start_timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(
        BridgeTimeoutError, match=r"(?s)no answer to 'hello' within 1 s.*TQ_SYCL_BRIDGE_START_TIMEOUT.*JIT-compiling"
    ):
        b.start()
    assert time.monotonic() - t0 < 10
    assert not pid_alive(b.pid)


def test_child_that_dies_at_start_shows_its_stderr():
    script = "import sys; sys.stderr.write('no libsycl.so.9 here\\n'); sys.exit(7)"
    b = Bridge("host", argv=[sys.executable, "-c", script], start_timeout=30)
    with pytest.raises(BridgeCrashError, match=r"(?s)exited with status 7 during 'hello'.*no libsycl.so.9 here"):
        b.start()


def test_child_that_is_not_a_bridge():
    b = Bridge("host", argv=[sys.executable, "-c", "print('hello world')"], start_timeout=30)
    with pytest.raises(BridgeProtocolError, match="did not start with a JSON hello"):
        b.start()


def test_version_mismatch_is_a_clear_error():
    b = Bridge("host", argv=[*FAULT_CHILD, "--claim-version", "0.0.1", *HOST], start_timeout=60)
    with pytest.raises(BridgeVersionError, match=r"tq_sycl 0.0.1 \(parent has 0.1.0\).*Reinstall tq-sycl"):
        b.start()
    assert not b.alive


def test_missing_module_in_the_child_is_reported():
    # the nightly backend without a nightly build: the child says what failed to load
    b = Bridge("nightly", env=dict(os.environ), start_timeout=60)
    with pytest.raises(BridgeError, match=r"could not load its SYCL module: (ModuleNotFoundError|ImportError)"):
        b.start()


def test_no_shell_between_parent_and_child(tmp_path):
    # an argument full of shell syntax reaches the child verbatim: no shell parsed it
    marker = tmp_path / "touched"
    arg = f"$(touch {marker}); `touch {marker}` | ; > {marker}"
    script = "import sys, json; print(json.dumps({'type': 'x', 'argv': sys.argv[1]}))"
    b = Bridge("host", argv=[sys.executable, "-c", script, arg], start_timeout=30)
    with pytest.raises(BridgeProtocolError, match="not a hello"):
        b.start()
    assert not marker.exists()


def test_four_threads_share_one_bridge(gen):
    # one process-wide bridge serves every thread: each exchange (request, shared memory,
    # answer) is serialised, so every thread gets its own call's result
    cases = [
        make_case(gen, preset, seq_lens=[17 + 9 * i, 40 - 5 * i], q_lens=[1 + i, 2])
        for i, preset in enumerate(
            ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"]
        )
    ]
    refs = [c.reference() for c in cases]
    errors: list[BaseException] = []
    start = threading.Barrier(len(cases))

    def worker(i: int) -> None:
        try:
            start.wait()
            for it in range(6):
                out = torch.full_like(cases[i].query, float("nan"))
                got = b.attention(prepared(cases[i], out, 1 + it % 3), "host")
                assert_attention_close(got, refs[i], tol=2e-5, what=f"thread {i}, call {it}")
                assert b.request("status")["ok"] is True
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    with Bridge("host", argv=[*FAULT_CHILD, *HOST], request_timeout=60) as b:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a thread hangs"
        assert not errors, errors[0]
        assert b.alive


def _killed(b: Bridge) -> None:
    pid = b.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while b._proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pid_alive(pid)


def _served_one_call(case: PagedBatch) -> tuple[Bridge, str, IO[bytes] | None]:
    """A started fault-child bridge that has run ``case``: it, its shared-memory segment's
    path and its stderr file."""
    b = Bridge("host", argv=[*FAULT_CHILD, *HOST], request_timeout=60)
    b.start()
    b.attention(prepared(case), "host")
    return b, os.path.join(protocol.SHM_DIR, b.request("status")["segment"]), b._stderr


def test_child_killed_between_requests_gives_a_crash_error_and_frees_everything(gen):
    case = make_case(gen, "turboquant_k8v4", seq_lens=[21], q_lens=[2])
    b, shm, stderr = _served_one_call(case)
    assert os.path.exists(shm) and stderr is not None and not stderr.closed
    _killed(b)
    with pytest.raises(BridgeCrashError, match=r"was killed by SIGKILL (before|during) 'attention'"):
        b.attention(prepared(case), "host")
    assert not os.path.exists(shm), "the shared-memory segment outlived the child"
    assert stderr.closed, "the child's stderr file is still open"
    with pytest.raises(BridgeError, match="closed after an earlier failure"):
        b.request("status")
    b.close()  # idempotent


def test_close_after_the_child_died_frees_everything(gen):
    b, shm, stderr = _served_one_call(make_case(gen, "turboquant_3bit_nc", seq_lens=[12], q_lens=[1]))
    # a request left half-written in the pipe's buffer must not break close() either
    b._proc.stdin.write(b'{"id": 0, "op": "status"')
    _killed(b)
    b.close()
    assert not os.path.exists(shm), "close() left the shared-memory segment"
    assert stderr is not None and stderr.closed, "close() left the child's stderr file open"
    assert not b.alive


@pytest.mark.parametrize("bad", [-1, 0, 0.0, -0.5, math.inf, math.nan, True, "5"])
def test_timeouts_must_be_finite_and_positive(bad):
    for name in ("start_timeout", "request_timeout"):
        with pytest.raises(RangeError, match=rf"{name}={bad!r}: expected a finite number of seconds > 0"):
            Bridge("host", **{name: bad})


@pytest.mark.parametrize("raw", ["0", "-1", "inf", "nan", "soon"])
def test_timeouts_from_the_environment_are_checked(monkeypatch, raw):
    for env in ("TQ_SYCL_BRIDGE_START_TIMEOUT", "TQ_SYCL_BRIDGE_TIMEOUT"):
        monkeypatch.setenv(env, raw)
        with pytest.raises(RangeError, match=rf"{env}='{raw}': expected a finite number of seconds > 0"):
            Bridge("host")
        monkeypatch.delenv(env)


def test_timeout_defaults_and_overrides(monkeypatch):
    monkeypatch.delenv("TQ_SYCL_BRIDGE_START_TIMEOUT", raising=False)
    monkeypatch.delenv("TQ_SYCL_BRIDGE_TIMEOUT", raising=False)
    b = Bridge("host")
    assert (b.start_timeout, b.request_timeout) == (DEFAULT_START_TIMEOUT, DEFAULT_REQUEST_TIMEOUT) == (120.0, 300.0)
    monkeypatch.setenv("TQ_SYCL_BRIDGE_TIMEOUT", "7.5")
    assert Bridge("host").request_timeout == 7.5
    assert Bridge("host", request_timeout=2).request_timeout == 2.0  # the argument wins


def test_a_request_timeout_must_be_positive(bridge):
    with pytest.raises(RangeError, match=r"timeout=0: expected a finite number of seconds > 0"):
        bridge.request("status", timeout=0)
    assert bridge.request("status", timeout=5)["ok"] is True
