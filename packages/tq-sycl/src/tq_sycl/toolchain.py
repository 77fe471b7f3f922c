"""Finding the SYCL toolchains and describing what this installation has (``tq info``).

Two toolchains are looked for:

- stock oneAPI DPC++: ``$ONEAPI_ROOT/compiler/latest/bin/icpx`` (``ONEAPI_ROOT`` is set by
  setvars.sh), then ``/opt/intel/oneapi``, then ``icpx`` on PATH;
- an intel/llvm nightly: ``$TQ_SYCL_NIGHTLY_ROOT/bin/clang++`` with its ``lib/libsycl.so.*``.

Nothing here raises: every lookup that fails is reported as text saying what was tried.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import elf
from .__about__ import __version__

DEFAULT_ONEAPI = Path("/opt/intel/oneapi")
NIGHTLY_ENV = "TQ_SYCL_NIGHTLY_ROOT"


def oneapi_root() -> Path | None:
    env = os.environ.get("ONEAPI_ROOT")
    if env:
        return Path(env)
    return DEFAULT_ONEAPI if DEFAULT_ONEAPI.is_dir() else None


def icpx_candidates() -> list[str]:
    """Where icpx is looked for, in order (also printed when nothing is found)."""
    places = []
    env = os.environ.get("ONEAPI_ROOT")
    if env:
        places.append(str(Path(env) / "compiler" / "latest" / "bin" / "icpx"))
    places.append(str(DEFAULT_ONEAPI / "compiler" / "latest" / "bin" / "icpx"))
    places.append("icpx on PATH")
    return places


def icpx_path() -> Path | None:
    for cand in icpx_candidates()[:-1]:
        if Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    found = shutil.which("icpx")
    return Path(found) if found else None


def nightly_root() -> Path | None:
    env = os.environ.get(NIGHTLY_ENV)
    return Path(env) if env else None


def nightly_clang() -> Path | None:
    root = nightly_root()
    if root is None:
        return None
    exe = root / "bin" / "clang++"
    return exe if exe.is_file() else None


def compiler_version(exe: Path) -> str:
    """First line of ``exe --version`` (run directly, no shell)."""
    try:
        proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not run {exe} --version: {exc}"
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0] if lines else f"{exe} --version printed nothing (exit {proc.returncode})"


def libsycl_in(lib_dir: Path) -> str:
    """The libsycl sonames a toolchain ships (``libsycl.so.8``, ``libsycl.so.9``, ...)."""
    if not lib_dir.is_dir():
        return f"no {lib_dir}"
    names = sorted({p.name for p in lib_dir.glob("libsycl.so.*") if p.name.count(".") == 2})
    return ", ".join(names) or f"no libsycl.so.* in {lib_dir}"


def stock_env() -> dict[str, str]:
    """Environment for building/running with stock icpx without sourcing setvars.sh."""
    env = dict(os.environ)
    exe = icpx_path()
    if exe is not None:
        compiler = exe.parent.parent
        env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
        env["LD_LIBRARY_PATH"] = _prepend(compiler / "lib", env.get("LD_LIBRARY_PATH"))
    return env


def nightly_env() -> dict[str, str]:
    """Environment of the bridge child: the nightly's lib first, so libsycl.so.9 resolves there."""
    env = dict(os.environ)
    root = nightly_root()
    if root is not None:
        env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["LD_LIBRARY_PATH"] = _prepend(root / "lib", env.get("LD_LIBRARY_PATH"))
    return env


def _prepend(path: Path, rest: str | None) -> str:
    return str(path) if not rest else f"{path}{os.pathsep}{rest}"


def _module_line(name: str) -> tuple[str, str]:
    from .extensions import module_file

    try:
        path = module_file(name)
    except Exception as exc:  # a broken install must not break `tq info`
        return f"error: {exc}", "-"
    if path is None:
        return "not built", "-"
    try:
        soname = elf.libsycl_soname(path) or "links no libsycl"
    except (OSError, elf.ELFError) as exc:
        soname = f"unreadable: {exc}"
    return str(path), soname


def _torch_libsycl() -> str:
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return "torch not installed"
    lib = Path(spec.origin).parent / "lib"
    for name in ("libc10_xpu.so", "libtorch_xpu.so"):
        so = lib / name
        if so.is_file():
            try:
                return elf.libsycl_soname(so) or f"{name} links no libsycl"
            except (OSError, elf.ELFError) as exc:
                return f"unreadable {so}: {exc}"
    return "torch has no XPU libraries (CPU/CUDA build)"


def describe() -> dict[str, str]:
    """What ``tq info`` prints for tq-sycl: toolchains, sonames, compiled modules."""
    info: dict[str, str] = {"tq_sycl": __version__}
    root = oneapi_root()
    info["oneapi_root"] = str(root) if root else f"not found (ONEAPI_ROOT unset, no {DEFAULT_ONEAPI})"
    icpx = icpx_path()
    if icpx is None:
        info["icpx"] = "not found (looked for " + ", ".join(icpx_candidates()) + ")"
    else:
        info["icpx"] = str(icpx)
        info["icpx_version"] = compiler_version(icpx)
        info["icpx_libsycl"] = libsycl_in(icpx.parent.parent / "lib")
    nroot = nightly_root()
    if nroot is None:
        info["nightly_root"] = f"not set ({NIGHTLY_ENV})"
    else:
        info["nightly_root"] = str(nroot)
        clang = nightly_clang()
        info["nightly_clang++"] = str(clang) if clang else f"not found ({nroot / 'bin' / 'clang++'})"
        if clang:
            info["nightly_version"] = compiler_version(clang)
        info["nightly_libsycl"] = libsycl_in(nroot / "lib")
    for name in ("_host", "_stock", "_nightly"):
        path, soname = _module_line(name)
        info[f"module{name}"] = path
        if name != "_host":
            info[f"module{name}_libsycl"] = soname
    info["torch_libsycl"] = _torch_libsycl()
    return info
