"""tq-sycl as a tq backend (entry point ``tq.backends``: ``sycl``).

Attention only: tq-sycl has no store (caches are filled by tq_core or another backend's
store). The SYCL kernels have not run on Intel hardware yet (docs/sycl.md), so the
backend runs on XPU tensors when asked for by name and is never the automatic choice.
"""

from __future__ import annotations

from tq_core.contract import Backend


def sycl_backend() -> Backend:
    """The ``sycl`` backend: :func:`tq_sycl.attention` with its default kernel family."""
    from .api import attention

    return Backend(
        name="sycl",
        description="tq_sycl (SYCL kernels for Intel GPUs; attention only)",
        store=None,
        attention=attention,
        device_types=("xpu",),
        priority=5,
        auto_device_types=(),
    )
