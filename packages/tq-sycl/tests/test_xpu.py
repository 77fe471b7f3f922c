"""SYCL kernels on an Intel GPU vs tq_core (timings: ``python -m tq_sycl.bench``).

Everything here skips without a SYCL build and a device, unless the device sessions set
TQ_SYCL_REQUIRE_DEVICE=stock|nightly, which turns the matching skips into failures.
"""

from __future__ import annotations

import os

import pytest
import torch
from cases import make_case, prepared

import tq_core
import tq_sycl
from tq_core.testing import assert_attention_close
from tq_sycl import extensions, toolchain

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
    assert_attention_close(got, ref, tol=TOL[kernel], what=f"kernel={kernel}")


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
        call = prepared(case, None, splits)
        check(kernel, bridge.attention(call, kernel), case.reference())
