"""Intel xpu sessions.

- ``xpu_compile``: compiles every tq-triton kernel the xpu path launches (store, attention,
  merge; each preset, head_dim 64/128/256, GQA groups 1/4/8, q buckets 1..16, the Xe2 tuning
  table's configurations) for an Intel Xe2 target to SPIR-V with Intel's Triton, on a machine
  without an Intel GPU, and checks that the attention products use DPAS layouts and that no
  inline assembly reaches the LLVM IR. See packages/tq-triton/src/tq_triton/xpu_compile.py
  and docs/xpu.md. Nothing is run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import nox

from ._util import TORCH_CPU, install, pkg

# Triton with Intel's backend (the newest build on PyPI; older than the Triton that current
# torch XPU wheels bring, see docs/xpu.md) and the SYCL runtime whose headers and libsycl.so
# the backend builds its helper modules against.
TRITON_XPU = "triton-xpu==3.3.0b1"
INTEL_SYCL_RT = "intel-sycl-rt==2026.2.0"
LEVEL_ZERO_APT = ("libze1", "libze-dev")  # Level Zero loader and headers (the backend's driver.c)


def _level_zero_present() -> bool:
    heads = [Path(p) / "level_zero" / "ze_api.h" for p in ("/usr/include", "/usr/local/include")]
    if not any(h.is_file() for h in heads):
        return False
    try:
        proc = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return True  # headers are there; let the compile say what else is missing
    return "libze_loader.so" in proc.stdout


def _ensure_level_zero(session: nox.Session) -> None:
    if _level_zero_present():
        return
    may_apt = os.environ.get("TQ_XPU_APT", "1") != "0"
    if may_apt and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.log(f"xpu_compile: Level Zero missing; installing {' '.join(LEVEL_ZERO_APT)} with apt-get (as root)")
        session.run("apt-get", "update", external=True, env=env)
        session.run("apt-get", "install", "-y", "--no-install-recommends", *LEVEL_ZERO_APT, external=True, env=env)
        if _level_zero_present():
            return
    session.error(
        "xpu_compile: Level Zero's loader and headers are missing (level_zero/ze_api.h, libze_loader.so). "
        f"Debian/Ubuntu: `apt-get install {' '.join(LEVEL_ZERO_APT)}`; elsewhere Intel's level-zero packages"
    )


@nox.session
def xpu_compile(session: nox.Session) -> None:
    """tq-triton's kernels compiled for Intel Xe2 to SPIR-V (Intel's Triton 3.3; no GPU, nothing run)."""
    _ensure_level_zero(session)
    if not shutil.which(os.environ.get("CC", "g++")):
        session.error("xpu_compile: needs a C++ compiler for the backend's helper modules (g++ or $CC)")
    install(session, TORCH_CPU, TRITON_XPU, INTEL_SYCL_RT)
    # tq-triton has no triton dependency; --no-deps keeps pip from touching the Triton above
    install(session, "--no-deps", "-e", pkg("tq-core"), "-e", pkg("tq-triton"))
    install(session, "numpy>=1.24")
    with tempfile.TemporaryDirectory(prefix="tq-xpu-cache-") as cache:
        env = {
            "CC": os.environ.get("CC", "g++"),  # the backend compiles arch_parser.c/driver.c as C++ (SYCL)
            "TRITON_CACHE_DIR": cache,  # every run compiles from scratch
        }
        session.env.pop("TRITON_INTERPRET", None)
        session.run("python", "-m", "tq_triton.xpu_compile", *session.posargs, env=env)
