"""tq-sycl: SYCL, ESIMD and joint_matrix attention kernels over tq's compressed paged cache.

``tq_sycl.attention(..., kernel=...)`` has tq's shared signature. ``kernel="host"`` runs
the kernels' shared core compiled for the CPU (always built); ``"scalar"``, ``"esimd"``
and ``"jm"`` need a SYCL build and an Intel GPU (see docs/sycl.md).

Imports are lazy on purpose: the bridge child process imports ``tq_sycl.bridge.child``
and must never load torch (a torch-XPU build would bring a second libsycl into it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .__about__ import __version__

if TYPE_CHECKING:
    from . import toolchain
    from .api import KERNELS, attention, available_kernels

__all__ = ["KERNELS", "__version__", "attention", "available_kernels", "toolchain"]


def __getattr__(name: str) -> Any:
    # import_module, not `from . import x`: the latter looks the name up on this package
    # first and would recurse into __getattr__
    if name in ("attention", "available_kernels", "KERNELS"):
        return getattr(importlib.import_module(".api", __name__), name)
    if name == "toolchain":
        return importlib.import_module(".toolchain", __name__)
    raise AttributeError(f"module 'tq_sycl' has no attribute {name!r}")
