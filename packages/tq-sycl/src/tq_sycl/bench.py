"""``python -m tq_sycl.bench``: the SYCL kernel families timed at the turboquant-xpu project's PoC shape.

The shape: N_spec=8 query tokens per request, B=4 requests, Hq=32, Hk=4, D=128,
seq_len=8192, causal, float16, block_size 64. Each family the in-process stock build
(``tq_sycl._stock``) holds runs on the XPU next to the ``triton`` backend's attention when
tq-core's backend registry can load it for XPU tensors (tq-sycl imports no other backend);
each row gives the mean time of ``--iters`` calls after one warm-up call and the error
against ``tq_core.attention`` (:func:`tq_core.testing.attention_error`).
Needs an Intel GPU, torch-XPU and the stock build (``nox -s sycl_stock``); without them it
says what is missing and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch

from tq_core.contract import select_backend
from tq_core.errors import BackendUnavailableError
from tq_core.testing import PagedBatch, attention_error, paged_batch

from . import extensions
from .api import attention

PRESETS = ("turboquant_k8v4", "turboquant_k3v4_nc")
NUM_REQS, Q_LEN, SEQ_LEN = 4, 8, 8192
HEAD_DIM, NUM_KV_HEADS, GROUP, BLOCK_SIZE = 128, 4, 8, 64
COMPARED_BACKEND = "triton"  # timed beside the families when installed (tq_core.contract registry)


def poc_batch(gen: torch.Generator, preset: str, device: torch.device) -> PagedBatch:
    """The PoC-shape batch, on ``device``."""
    return paged_batch(
        gen,
        preset,
        [SEQ_LEN] * NUM_REQS,
        [Q_LEN] * NUM_REQS,
        head_dim=HEAD_DIM,
        num_kv_heads=NUM_KV_HEADS,
        group=GROUP,
        block_size=BLOCK_SIZE,
        dtype=torch.float16,
        device=device,
        spare_blocks=0,
    )


def time_ms(fn: Callable[[], object], iters: int) -> float:
    """Mean milliseconds of ``fn`` over ``iters`` calls after one warm-up call (XPU synchronised)."""
    fn()
    torch.xpu.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.xpu.synchronize()
    return (time.perf_counter() - t0) / iters * 1e3


def bench_preset(preset: str, kernels: list[str], iters: int, seed: int) -> list[tuple[str, float, float]]:
    """``(implementation, ms, error vs tq_core)`` for each kernel family, then the ``triton``
    backend where the registry can load it for XPU tensors."""
    batch = poc_batch(torch.Generator().manual_seed(seed), preset, torch.device("xpu"))
    ref = batch.reference()
    impls: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        f"tq_sycl {k}": (lambda o, k=k: attention(*batch.args(), out=o, kernel=k)) for k in kernels
    }
    try:
        other, _ = select_backend(batch.query.device, COMPARED_BACKEND, need_store=False)
    except BackendUnavailableError:
        pass
    else:
        impls[f"tq_{other.name}"] = lambda o: other.attention(*batch.args(), out=o)
    rows = []
    for name, fn in impls.items():
        out = torch.empty_like(batch.query)
        err = attention_error(fn(out), ref)
        rows.append((name, time_ms(lambda fn=fn, out=out: fn(out), iters), err))
    return rows


def missing() -> str | None:
    """Why the benchmark cannot run here, or None."""
    if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        return "torch.xpu is absent or sees no device"
    try:
        extensions.stock_module()
    except BackendUnavailableError as exc:
        return f"no stock build: {exc} (nox -s sycl_stock builds it)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tq_sycl.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", help=f"repeatable; default {', '.join(PRESETS)}")
    parser.add_argument("--kernel", action="append", help="repeatable; default every family the build holds")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    why = missing()
    if why is not None:
        print(f"tq_sycl.bench: cannot run: {why}", file=sys.stderr)
        return 2
    kernels = ns.kernel or list(extensions.stock_module().kernels())
    for preset in ns.preset or PRESETS:
        rows = bench_preset(preset, kernels, ns.iters, ns.seed)
        print(f"PoC shape, {preset}: " + ", ".join(f"{n} {ms:.3f} ms (error {err:.2g})" for n, ms, err in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
