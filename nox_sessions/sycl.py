"""tq-sycl sessions.

- ``sycl_host`` (CI): builds ``tq_sycl._host`` (the SYCL kernels' shared core, no SYCL)
  with the system C++ compiler through scikit-build-core/CMake/pybind11 and tests it, the
  bridge and the toolchain report against tq_core on CPU torch.
- ``sycl_stock`` / ``sycl_nightly``: build the SYCL module with stock oneAPI icpx or an
  intel/llvm nightly and run the same tests plus the XPU ones. They skip, saying exactly
  what was looked for, when the compiler or an Intel GPU is missing.
- ``sycl_headers`` (CI): type-checks every source of the SYCL module against the SYCL, ESIMD and
  joint_matrix headers of the pinned ``intel-sycl-rt`` wheel with a host clang
  (``-fsyntax-only``); see nox_sessions/sycl_headers.py. No SYCL compiler or GPU needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import nox

from . import sycl_headers as sh
from ._util import ROOT, install, install_core, may_apt, pkg, pytest, see_host_packages

SYCL = pkg("tq-sycl")
TESTS = SYCL + "/tests"
TOOLCHAINS = Path(SYCL) / "cmake" / "toolchains"
DEFAULT_ONEAPI = Path("/opt/intel/oneapi")


def _icpx_candidates() -> list[Path]:
    roots = [Path(os.environ["ONEAPI_ROOT"])] if os.environ.get("ONEAPI_ROOT") else []
    return [r / "compiler" / "latest" / "bin" / "icpx" for r in [*roots, DEFAULT_ONEAPI]]


def _find_icpx() -> Path | None:
    for cand in _icpx_candidates():
        if cand.is_file():
            return cand
    found = shutil.which("icpx")
    return Path(found) if found else None


def _gpus(sycl_ls: Path, env: dict[str, str]) -> tuple[list[str], str]:
    """GPU lines of ``sycl-ls`` (run directly, no shell) and its whole output."""
    if not sycl_ls.is_file():
        return [], f"{sycl_ls} does not exist"
    try:
        proc = subprocess.run([str(sycl_ls)], capture_output=True, text=True, timeout=120, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"{sycl_ls} failed: {exc}"
    text = (proc.stdout + proc.stderr).strip()
    return [ln for ln in text.splitlines() if ":gpu" in ln], text or "(no output)"


def _pytest_env(session: nox.Session, env: dict[str, str]) -> None:
    # _util.pytest() with an environment (the device sessions need one)
    session.run("python", "-m", "pytest", TESTS, "-ra", "-q", "-p", "no:cacheprovider", *session.posargs, env=env)


def _with_lib(env: dict[str, str], lib: Path) -> dict[str, str]:
    out = dict(env)
    out["LD_LIBRARY_PATH"] = f"{lib}{os.pathsep}{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else str(lib)
    return out


@nox.session(tags=["tests", "ci", "full"])
def sycl_host(session: nox.Session) -> None:
    """Host core (system C++ compiler via pybind11, no SYCL) vs tq_core; the bridge with a real child."""
    install_core(session)
    # a regular (non-editable) install: scikit-build-core runs CMake in pip's isolated
    # build environment, exactly as a user's `pip install packages/tq-sycl` does
    install(session, SYCL)
    pytest(session, TESTS)


@nox.session(venv_params=["--system-site-packages"])
def sycl_stock(session: nox.Session) -> None:
    """Stock oneAPI icpx build, in-process beside torch-XPU; needs icpx, an Intel GPU and torch-XPU."""
    icpx = _find_icpx()
    if icpx is None:
        looked = ", ".join(str(c) for c in _icpx_candidates())
        oneapi = os.environ.get("ONEAPI_ROOT") or "unset"
        session.skip(
            f"sycl_stock: no stock oneAPI DPC++ compiler. Looked for {looked} and `icpx` on PATH "
            f"(ONEAPI_ROOT={oneapi}). Install the oneAPI Base Toolkit and source setvars.sh, or set ONEAPI_ROOT"
        )
    compiler = icpx.parent.parent
    env = _with_lib(dict(os.environ), compiler / "lib")
    env["PATH"] = f"{icpx.parent}{os.pathsep}{env.get('PATH', '')}"
    gpus, listing = _gpus(icpx.parent / "sycl-ls", env)
    if not gpus:
        session.skip(f"sycl_stock: found {icpx}, but `sycl-ls` listed no GPU device. sycl-ls said:\n{listing}")
    see_host_packages(session)
    probe = "import torch; print('XPU_OK' if hasattr(torch, 'xpu') and torch.xpu.is_available() else 'XPU_NO')"
    seen = session.run("python", "-c", probe, silent=True, success_codes=[0, 1], env=env) or ""
    if "XPU_OK" not in seen:
        session.skip(
            "sycl_stock: this environment's torch has no usable XPU (looked for `import torch` with "
            "torch.xpu.is_available() in the system site-packages this session inherits). Install torch's "
            f"XPU build (its libsycl.so.8 must match icpx's). Probe said: {seen.strip()[-300:]}"
        )
    install(session, "--no-deps", "-e", pkg("tq-core"), env=env)
    install(
        session,
        "--no-deps",
        SYCL,
        "-C",
        "cmake.define.TQ_SYCL_BACKEND=stock",
        "-C",
        f"cmake.define.CMAKE_TOOLCHAIN_FILE={TOOLCHAINS / 'icpx.cmake'}",
        "-C",
        f"cmake.define.TQ_SYCL_AOT_TARGET={os.environ.get('TQ_SYCL_AOT_TARGET', '')}",
        env=env,
    )
    install(session, "pytest>=8", env=env)
    _pytest_env(session, {**env, "TQ_SYCL_REQUIRE_DEVICE": "stock"})


@nox.session
def sycl_nightly(session: nox.Session) -> None:
    """intel/llvm nightly build, run through the bridge child; needs TQ_SYCL_NIGHTLY_ROOT and an Intel GPU."""
    raw = os.environ.get("TQ_SYCL_NIGHTLY_ROOT")
    if not raw:
        session.skip(
            "sycl_nightly: TQ_SYCL_NIGHTLY_ROOT is not set. Looked for $TQ_SYCL_NIGHTLY_ROOT/bin/clang++ and "
            "$TQ_SYCL_NIGHTLY_ROOT/lib/libsycl.so.* (an unpacked intel/llvm nightly release or a local install)"
        )
    root = Path(raw)
    clang = root / "bin" / "clang++"
    libsycl = sorted(p.name for p in (root / "lib").glob("libsycl.so.*")) if (root / "lib").is_dir() else []
    if not clang.is_file() or not libsycl:
        session.skip(
            f"sycl_nightly: TQ_SYCL_NIGHTLY_ROOT={root} is not an intel/llvm install: "
            f"{clang} {'exists' if clang.is_file() else 'is missing'}, "
            f"{root / 'lib'}/libsycl.so.* {'found ' + ', '.join(libsycl) if libsycl else 'not found'}"
        )
    env = _with_lib(dict(os.environ), root / "lib")
    gpus, listing = _gpus(root / "bin" / "sycl-ls", env)
    if not gpus:
        session.skip(f"sycl_nightly: found {clang}, but its `sycl-ls` listed no GPU device. sycl-ls said:\n{listing}")
    # the parent stays on CPU torch: the nightly module only ever runs in the bridge child
    install_core(session)
    install(
        session,
        SYCL,
        "-C",
        "cmake.define.TQ_SYCL_BACKEND=nightly",
        "-C",
        f"cmake.define.CMAKE_TOOLCHAIN_FILE={TOOLCHAINS / 'intel-llvm-nightly.cmake'}",
        "-C",
        f"cmake.define.TQ_SYCL_AOT_TARGET={os.environ.get('TQ_SYCL_AOT_TARGET', '')}",
        env=env,
    )
    _pytest_env(session, {"TQ_SYCL_REQUIRE_DEVICE": "nightly"})


def _clang_or_install(session: nox.Session) -> tuple[str, int, str]:
    """The clang for ``sycl_headers``; installs Debian's newest clang-NN with apt when none is
    found and the session runs as root with apt-get (TQ_SYCL_HEADERS_APT=0 turns that off)."""
    found = sh.find_clang()
    if found:
        return found
    may, why_not = may_apt("TQ_SYCL_HEADERS_APT")
    if os.environ.get(sh.CLANG_ENV):
        may, why_not = False, f"${sh.CLANG_ENV} names the compiler to use"
    if may:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.log(f"sycl_headers: no clang++ >= {sh.CLANG_MIN} found; installing one with apt-get (as root)")
        session.run("apt-get", "update", external=True, env=env)
        majors = sh.apt_clang_candidates()
        if not majors:
            why_not = f"apt knows no clang-NN package with NN >= {sh.CLANG_MIN}"
        else:
            pkg_name = f"clang-{majors[0]}"
            session.run("apt-get", "install", "-y", "--no-install-recommends", pkg_name, external=True, env=env)
            found = sh.find_clang()
            if found:
                return found
            why_not = f"`apt-get install {pkg_name}` ran, but no clang++ >= {sh.CLANG_MIN} is found after it"
    where = (
        f"${sh.CLANG_ENV} ({os.environ[sh.CLANG_ENV]})"
        if os.environ.get(sh.CLANG_ENV)
        else f"clang++-NN (NN >= {sh.CLANG_MIN}) and clang++ on PATH"
    )
    session.error(
        f"sycl_headers: no clang++ >= {sh.CLANG_MIN} (looked for {where}); not installed automatically: "
        f"{why_not}. To fix: {sh.install_hint()}. Then run `nox -s sycl_headers` again"
    )
    raise AssertionError  # session.error raises; this keeps type checkers content


def _head(text: str, n: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:n] + ([f"... ({len(lines) - n} more lines)"] if len(lines) > n else []))


_INCLUDES = """
import importlib.metadata as m, pathlib, sysconfig, pybind11
d = m.distribution("intel-sycl-rt")
hits = [f for f in d.files or [] if str(f).endswith("include/sycl/sycl.hpp")]
print(pathlib.Path(d.locate_file(hits[0])).resolve().parents[1] if hits else "")
print(pybind11.get_include())
print(sysconfig.get_paths()["include"])
"""


@nox.session(tags=["tests", "ci", "full"])
def sycl_headers(session: nox.Session) -> None:
    """Type-check every SYCL module source against intel-sycl-rt's headers with a host clang (-fsyntax-only)."""
    clang, major, version = _clang_or_install(session)
    session.log(f"sycl_headers: {version} ({clang})")
    install(session, "--no-deps", sh.INTEL_SYCL_RT, sh.PYBIND11)
    out = session.run("python", "-c", _INCLUDES, silent=True)
    if not isinstance(out, str):  # --install-only
        return
    sycl_inc, pybind_inc, py_inc = [*out.strip().splitlines(), "", "", ""][:3]
    if not sycl_inc or not Path(sycl_inc, "sycl", "ext", "intel", "esimd.hpp").is_file():
        session.error(
            f"sycl_headers: {sh.INTEL_SYCL_RT} installed no include/sycl/sycl.hpp + ESIMD headers ({sycl_inc!r})"
        )
    if not Path(py_inc, "Python.h").is_file():
        session.error(
            f"sycl_headers: no Python.h in {py_inc} (the bindings need Python's headers: install python3-dev)"
        )
    csrc = Path(SYCL) / "csrc"
    device_ok, device_note = sh.probe_device(clang, sycl_inc, Path(session.create_tmp()))
    views = ["host", "device"] if device_ok else ["host"]
    jobs = sh.jobs_default()
    session.log(f"sycl_headers: headers {sycl_inc}; views {', '.join(views)}; {jobs} jobs")
    t0 = time.monotonic()
    results = sh.check_all(clang, csrc, sycl_inc, [pybind_inc, py_inc], views, jobs)
    root = f"{ROOT}/"
    for r in results:
        if r.rc != 0:
            session.log(
                f"--- {r.unit.source} ({r.unit.flavor}, {r.view} view): clang said\n"
                + _head(r.output.replace(root, ""), 80)
            )
    session.log(
        f"sycl_headers ({sh.INTEL_SYCL_RT}, clang {major}):\n" + sh.table(results, "" if device_ok else device_note)
    )
    failed = [r for r in results if r.rc != 0]
    if failed:
        first = "; ".join(
            f"{r.unit.source} [{r.unit.flavor}, {r.view}]: {(r.errors or ['rc ' + str(r.rc)])[0].replace(root, '')}"
            for r in failed
        )
        session.error(f"sycl_headers: {len(failed)} of {len(results)} checks failed: {first}")
    session.log(f"sycl_headers: {len(results)} checks passed in {time.monotonic() - t0:.0f}s")
