"""tq info: installed tq packages, torch, devices, backends and toolchains. Never fails."""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from importlib import metadata

DISTRIBUTIONS = ("tq-core", "tq-triton", "tq-sycl", "tq-vllm")
# other packages add sections: an entry point NAME = "module:function", function() -> dict
INFO_GROUP = "tq.info"


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
    info["backends"] = _guard_dict(_backends)
    for ep in metadata.entry_points(group=INFO_GROUP):
        info[ep.name] = _guard_dict(lambda ep=ep: ep.load()())
    return info


def _backends() -> dict[str, str]:
    from ..contract import backend_names, load_backend

    out = {}
    for name in backend_names():
        try:
            b = load_backend(name)
            out[name] = f"{b.description}; runs on {', '.join(b.device_types)}"
        except Exception as exc:
            out[name] = f"unavailable ({exc})"
    return out


def _guard_dict(fn: Callable[[], object]) -> dict[str, str] | str:
    try:
        return {str(k): str(v) for k, v in dict(fn()).items()}  # type: ignore[call-overload]
    except Exception as exc:  # a plugin's section must not break the report
        return f"unavailable ({type(exc).__name__}: {exc})"


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
