"""Intel xpu sessions.

- ``xpu_compile-full`` (``nox -t full``): compiles every tq-triton kernel the xpu path
  launches (store, attention, merge; each preset, head_dim 64/128/256, GQA groups 1/4/8, q
  buckets 1..16, the Xe2 tuning table's configurations) for an Intel Xe2 target to SPIR-V with
  Intel's Triton, on a machine without an Intel GPU, and checks that the attention products
  use DPAS layouts, that no inline assembly reaches the LLVM IR and that each kernel's shared
  local memory fits an Xe2 work-group. The compiles run in parallel (``TQ_XPU_COMPILE_JOBS``,
  default every CPU). See nox_sessions/xpu_compile_check.py and docs/xpu.md. Nothing is run.
- ``xpu_compile`` (``nox -t tests``, and CI's ``nox -t ci``): the same checks on a cover of
  those launches
  (``--cover``: each kernel with each preset, head_dim, block size, GQA group, q bucket and table
  configuration at least once).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import nox

from ._util import ROOT, TORCH_CPU, install, may_apt, pkg

# Triton with Intel's backend (the newest build on PyPI; older than the Triton that current
# torch XPU wheels bring, see docs/xpu.md) and the SYCL runtime whose headers and libsycl.so
# the backend builds its helper modules against.
TRITON_XPU = "triton-xpu==3.3.0b1"
INTEL_SYCL_RT = "intel-sycl-rt==2026.2.0"
LEVEL_ZERO_APT = ("libze1", "libze-dev")  # Level Zero loader and headers (the backend's driver.c)
# the compile check: a test tool, run as a script, not part of the tq-triton wheel
CHECK = ROOT / "nox_sessions" / "xpu_compile_check.py"


def _level_zero_missing() -> list[str]:
    """What of Level Zero the backend's driver.c needs is not on this machine."""
    heads = [Path(p) / "level_zero" / "ze_api.h" for p in ("/usr/include", "/usr/local/include")]
    missing = [] if any(h.is_file() for h in heads) else ["the headers (level_zero/ze_api.h)"]
    try:
        proc = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return missing  # no ldconfig to ask; the backend's own build says so if the loader is missing
    return missing + ([] if "libze_loader.so" in proc.stdout else ["the loader (libze_loader.so)"])


def _ensure_level_zero(session: nox.Session) -> None:
    missing = _level_zero_missing()
    if not missing:
        return
    may, why_not = may_apt("TQ_XPU_APT")
    if may:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.log(f"xpu_compile: Level Zero missing; installing {' '.join(LEVEL_ZERO_APT)} with apt-get (as root)")
        session.run("apt-get", "update", external=True, env=env)
        session.run("apt-get", "install", "-y", "--no-install-recommends", *LEVEL_ZERO_APT, external=True, env=env)
        missing = _level_zero_missing()
        if not missing:
            return
        why_not = f"`apt-get install {' '.join(LEVEL_ZERO_APT)}` ran, but they are still missing"
    session.error(
        f"xpu_compile: Intel's Triton backend needs Level Zero, and {' and '.join(missing)} "
        f"{'are' if len(missing) > 1 else 'is'} missing; not installed automatically: {why_not}. Install "
        f"Level Zero's loader and headers: on Debian/Ubuntu `sudo apt-get install {' '.join(LEVEL_ZERO_APT)}`, "
        "elsewhere your distribution's level-zero loader and development packages. Then run "
        f"`nox -s {session.name}` again"
    )


def _compile(session: nox.Session, *args: str) -> None:
    _ensure_level_zero(session)
    cc = os.environ.get("CC", "g++")
    if not shutil.which(cc):
        session.error(
            f"xpu_compile: Intel's Triton backend builds its helper modules (C++ with SYCL headers) with "
            f"$CC or g++, and {cc!r} is not on PATH. Install g++ (Debian/Ubuntu: `sudo apt-get install g++`) "
            "or set CC to a C++ compiler"
        )
    install(session, TORCH_CPU, TRITON_XPU, INTEL_SYCL_RT)
    # tq-triton has no triton dependency; --no-deps keeps pip from touching the Triton above
    install(session, "--no-deps", "-e", pkg("tq-core"), "-e", pkg("tq-triton"))
    install(session, "numpy>=1.24")
    with tempfile.TemporaryDirectory(prefix="tq-xpu-cache-") as cache:
        env = {
            "CC": cc,  # the backend compiles arch_parser.c/driver.c as C++ (SYCL)
            "TRITON_CACHE_DIR": cache,  # every run compiles from scratch
        }
        session.env.pop("TRITON_INTERPRET", None)
        session.run("python", str(CHECK), *args, *session.posargs, env=env)


@nox.session(tags=["tests", "ci"])
def xpu_compile(session: nox.Session) -> None:
    """A cover of tq-triton's xpu launches compiled for Intel Xe2 to SPIR-V (Intel's Triton 3.3;
    no GPU, nothing run): each kernel with each preset, head_dim, block size, GQA group, q bucket, tile
    rows and table configuration at least once."""
    _compile(session, "--cover")


@nox.session(name="xpu_compile-full", tags=["full"])
def xpu_compile_full(session: nox.Session) -> None:
    """Every tq-triton xpu launch compiled for Intel Xe2 to SPIR-V (Intel's Triton 3.3; no GPU,
    nothing run)."""
    _compile(session)
    # the cover that xpu_compile (and CI) compiles is still chosen (no compiles)
    out = session.run("python", str(CHECK), "--cover", "--list", silent=True)
    if isinstance(out, str):  # nox --install-only / dry runs return None
        session.log(f"xpu_compile's cover (--cover): {out.strip().splitlines()[-1]}")
