"""tq info: installed tq packages, torch, devices and toolchains. Never fails."""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
from collections.abc import Callable
from importlib import metadata

DISTRIBUTIONS = ("tq-core", "tq-triton", "tq-sycl", "tq-vllm")


def _guard(fn: Callable[[], object]) -> str:
    try:
        return str(fn())
    except Exception as exc:  # info must report, never crash
        return f"unavailable ({type(exc).__name__}: {exc})"


def package_versions() -> dict[str, str]:
    out = {}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
        except Exception as exc:
            out[dist] = f"unknown ({type(exc).__name__})"
    return out


def _cuda_devices(torch) -> list[str]:
    if not torch.cuda.is_available():
        return []
    return [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]


def _xpu_devices(torch) -> list[str]:
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return []
    return [f"xpu:{i} {xpu.get_device_name(i)}" for i in range(xpu.device_count())]


def collect() -> dict[str, object]:
    """Everything tq info prints, as a dict of sections (each value a str or dict)."""
    info: dict[str, object] = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": _guard(platform.platform),
        "packages": package_versions(),
    }
    try:
        import torch
    except Exception as exc:
        info["torch"] = f"not importable ({type(exc).__name__}: {exc})"
        return info
    info["torch"] = torch.__version__
    devices: dict[str, str] = {"cpu": _guard(lambda: f"{torch.get_num_threads()} threads")}
    cuda = _guard(lambda: ", ".join(_cuda_devices(torch)) or "none")
    devices["cuda"] = cuda
    devices["xpu"] = _guard(lambda: ", ".join(_xpu_devices(torch)) or "none")
    info["devices"] = devices
    try:
        import triton

        info["triton"] = getattr(triton, "__version__", "unknown version")
    except Exception as exc:
        info["triton"] = f"not importable ({type(exc).__name__})"
    try:
        toolchain = importlib.import_module("tq_sycl.toolchain")
        describe = getattr(toolchain, "describe", None)
        if callable(describe):
            desc = describe()
            info["sycl toolchain"] = {str(k): str(v) for k, v in dict(desc).items()}
    except Exception as exc:
        if not isinstance(exc, ModuleNotFoundError):
            info["sycl toolchain"] = f"unavailable ({type(exc).__name__}: {exc})"
    return info


def render(info: dict[str, object]) -> str:
    lines = []
    width = 16
    for section, value in info.items():
        if isinstance(value, dict):
            lines.append(f"{section}:")
            w = max((len(k) for k in value), default=0)
            lines.extend(f"  {k:<{w}}  {v}" for k, v in value.items())
        else:
            lines.append(f"{section + ':':<{width}} {value}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    print(render(collect()))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("info", help="installed tq packages, torch, devices", description=__doc__)
    p.set_defaults(func=run)
