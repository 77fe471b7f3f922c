"""Finding and importing the compiled modules (``_host``, ``_stock``, ``_nightly``)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

from tq_core.errors import BackendUnavailableError

from .__about__ import __version__

PACKAGE_DIR = Path(__file__).resolve().parent


def module_file(name: str) -> Path | None:
    """Path of the compiled module ``tq_sycl.<name>`` without importing it, or None."""
    spec = importlib.util.find_spec(f"tq_sycl.{name}")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin)


def _check_version(mod: ModuleType, name: str) -> ModuleType:
    built = mod.version()
    if built != __version__:
        raise BackendUnavailableError(
            f"tq_sycl.{name} was built from tq-sycl {built} but the Python package is {__version__}: "
            "rebuild it (pip install --force-reinstall packages/tq-sycl)"
        )
    return mod


@functools.cache
def host_module() -> ModuleType:
    """The host core (``tq_sycl._host``); raises BackendUnavailableError when not built."""
    try:
        mod = importlib.import_module("tq_sycl._host")
    except ImportError as exc:
        raise BackendUnavailableError(
            f"tq_sycl._host is not importable ({exc}): install tq-sycl from source with a C++17 "
            "compiler (pip install packages/tq-sycl builds it with CMake and pybind11)"
        ) from exc
    return _check_version(mod, "_host")


@functools.cache
def stock_module() -> ModuleType:
    """The in-process SYCL module built by stock icpx; needs torch-XPU loaded first."""
    import torch

    if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise BackendUnavailableError("tq_sycl._stock needs torch with XPU support and a visible XPU device")
    try:
        mod = importlib.import_module("tq_sycl._stock")
    except ImportError as exc:
        raise BackendUnavailableError(
            f"tq_sycl._stock is not importable ({exc}): build it with `nox -s sycl_stock` or "
            "pip install packages/tq-sycl -C cmake.define.TQ_SYCL_BACKEND=stock "
            "-C cmake.define.CMAKE_TOOLCHAIN_FILE=cmake/toolchains/icpx.cmake"
        ) from exc
    return _check_version(mod, "_stock")
