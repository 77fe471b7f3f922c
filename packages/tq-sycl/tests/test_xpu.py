"""SYCL kernels on an Intel GPU vs tq_core, and the PoC-shape benchmark vs tq_triton.

Everything here skips without a SYCL build and a device, unless the device sessions set
TQ_SYCL_REQUIRE_DEVICE=stock|nightly, which turns the matching skips into failures.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
from cases import make_case

import tq_core
import tq_sycl
from tq_sycl import extensions, kernel_args, toolchain

PRESETS = sorted(tq_core.PRESETS)
FAMILIES = ["scalar", "esimd", "jm"]
REQUIRE = os.environ.get("TQ_SYCL_REQUIRE_DEVICE", "")
# scalar keeps float32 throughout; esimd and jm feed fp16 Q, K, P, V to the matrix engines
TOL = {"scalar": 5e-5, "esimd": 2e-2, "jm": 2e-2}


def need(flavor: str, ok: bool, why: str) -> None:
    if ok:
        return
    if flavor == REQUIRE:
        pytest.fail(f"TQ_SYCL_REQUIRE_DEVICE={flavor} but {why}")
    pytest.skip(why)


def stock_kernels() -> list[str]:
    xpu = hasattr(torch, "xpu") and torch.xpu.is_available()
    need("stock", xpu, "torch.xpu is absent or sees no device")
    need("stock", extensions.module_file("_stock") is not None, "tq_sycl._stock is not built (nox -s sycl_stock)")
    return list(extensions.stock_module().kernels())


_bridge = None


def nightly_bridge():
    global _bridge
    need("nightly", toolchain.nightly_root() is not None, "TQ_SYCL_NIGHTLY_ROOT is not set")
    need(
        "nightly", extensions.module_file("_nightly") is not None, "tq_sycl._nightly is not built (nox -s sycl_nightly)"
    )
    if _bridge is None or not _bridge.alive:
        from tq_sycl.bridge.client import Bridge

        _bridge = Bridge("nightly")
        _bridge.start()
    return _bridge


def check(kernel: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float().cpu(), ref.float(), atol=TOL[kernel], rtol=TOL[kernel])


@pytest.mark.parametrize("kernel", FAMILIES)
@pytest.mark.parametrize("preset", PRESETS)
def test_stock_kernels_match_tq_core(gen, kernel, preset):
    kernels = stock_kernels()
    if kernel not in kernels:
        pytest.skip(f"tq_sycl._stock was built without {kernel!r} (has {kernels})")
    case = make_case(gen, preset, seq_lens=[300, 17, 64], q_lens=[8, 1, 3], group=4, dtype=torch.float16)
    ref = case.reference()
    dev = torch.device("xpu")
    args = [a.to(dev) if isinstance(a, torch.Tensor) else a for a in case.args()]
    for splits in (1, 4):
        got = tq_sycl.attention(*args, kernel=kernel, num_splits=splits)
        check(kernel, got, ref)


@pytest.mark.parametrize("kernel", FAMILIES)
@pytest.mark.parametrize("preset", PRESETS)
def test_nightly_kernels_match_tq_core(gen, kernel, preset):
    bridge = nightly_bridge()
    if kernel not in bridge.kernels:
        pytest.skip(f"tq_sycl._nightly was built without {kernel!r} (has {bridge.kernels})")
    case = make_case(gen, preset, seq_lens=[300, 17, 64], q_lens=[8, 1, 3], group=4, dtype=torch.float16)
    for splits in (1, 4):
        call = kernel_args.prepare(*case.args(), None, splits)
        check(kernel, bridge.attention(call, kernel), case.reference())


@pytest.mark.parametrize("preset", ["turboquant_k8v4", "turboquant_k3v4_nc"])
def test_benchmark_poc_shape(gen, preset):
    """The turboquant-xpu project's PoC shape: N_spec=8, B=4, Hq=32, Hk=4, D=128, seq_len=8192, causal."""
    kernels = stock_kernels()
    dev = torch.device("xpu")
    b, q_len, seq = 4, 8, 8192
    case = make_case(
        gen,
        preset,
        head_dim=128,
        block_size=64,
        num_kv_heads=4,
        group=8,
        seq_lens=[seq] * b,
        q_lens=[q_len] * b,
        dtype=torch.float16,
        spare_blocks=0,
    )
    args = [a.to(dev) if isinstance(a, torch.Tensor) else a for a in case.args()]
    ref = case.reference()
    timings = {}

    def bench(fn) -> float:
        fn()
        torch.xpu.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        torch.xpu.synchronize()
        return (time.perf_counter() - t0) / 20 * 1e3

    for kernel in kernels:
        out = torch.empty_like(args[0])
        check(kernel, tq_sycl.attention(*args, out=out, kernel=kernel), ref)
        timings[f"tq_sycl {kernel}"] = bench(lambda k=kernel, o=out: tq_sycl.attention(*args, out=o, kernel=k))
    try:
        import tq_triton
    except ImportError:
        tq_triton = None
    if tq_triton is not None:
        out = torch.empty_like(args[0])
        timings["tq_triton"] = bench(lambda: tq_triton.attention(*args, out=out))
    print(f"\nPoC shape {preset}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in timings.items()))
