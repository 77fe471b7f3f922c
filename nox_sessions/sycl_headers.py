"""Type-check tq-sycl's C++ sources against oneAPI's SYCL headers with a host clang.

Used by the ``sycl_headers`` session (nox_sessions/sycl.py). No SYCL compiler is needed:
``intel-sycl-rt`` (PyPI) ships DPC++'s headers (``sycl/sycl.hpp``, ESIMD, joint_matrix), and
an upstream clang parses them with ``-fsyntax-only``. What each view means:

- ``host``: ``-Xclang -fsycl-is-host``, the mode icpx's own host pass runs in (it defines
  ``SYCL_LANGUAGE_VERSION``). Every template a kernel instantiates is type-checked, since
  the kernel lambdas are instantiated through ``parallel_for`` on the host side too.
- ``device``: ``-Xclang -fsycl-is-device`` (defines ``__SYCL_DEVICE_ONLY__``). DPC++'s
  device-side headers need intel/llvm's builtins (``__builtin_field_type``,
  ``__ocl_event_t``, the ``__spirv_*`` declarations, distinct address-space types), which
  upstream clang lacks, so the view is probed with a bare ``#include <sycl/sycl.hpp>``
  first and only run for the sources when that probe compiles.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# Pinned: the headers the sources are checked against. Installed with --no-deps (its
# dependencies are the runtime libraries, ~1 GB, which a syntax check never loads).
INTEL_SYCL_RT = "intel-sycl-rt==2026.2.0"
PYBIND11 = "pybind11==3.1.0"  # the bindings' headers (pyproject asks for >=2.12)
CLANG_MIN = 19  # oldest clang this check was run with (Debian bookworm's clang-19); 22 too
CLANG_PREFERRED = 22
CLANG_ENV = "TQ_SYCL_CLANG"  # a clang++ to use instead of the newest clang++-NN on PATH
JOBS_ENV = "TQ_SYCL_HEADERS_JOBS"

FLAVOR_DEFINES = {
    # what cmake/sycl_module.cmake defines for each backend with its default families
    "stock": ['-DTQ_SYCL_FLAVOR="stock"', "-DTQ_SYCL_HAVE_SCALAR=1", "-DTQ_SYCL_HAVE_ESIMD=1"],
    "nightly": [
        '-DTQ_SYCL_FLAVOR="nightly"',
        "-DTQ_SYCL_HAVE_SCALAR=1",
        "-DTQ_SYCL_HAVE_ESIMD=1",
        "-DTQ_SYCL_HAVE_JM=1",
    ],
}
VIEWS = {
    "host": ["-Xclang", "-fsycl-is-host"],
    "device": ["-Xclang", "-fsycl-is-device"],
}


@dataclass(frozen=True)
class Unit:
    source: str  # relative to packages/tq-sycl/csrc
    flavor: str  # key of FLAVOR_DEFINES
    pybind: bool = False  # needs pybind11's and Python's headers


def units(csrc: Path) -> list[Unit]:
    """Every source of the SYCL module (cmake/sycl_module.cmake's list plus the module files).

    Kernel sources do not depend on the backend and are checked once, with every family on;
    launch.cpp and sycl_bindings.cpp switch on TQ_SYCL_HAVE_* and are checked for both
    backends' default families."""
    out: list[Unit] = []
    for path in sorted((csrc / "sycl").glob("*.cpp")):
        name = f"sycl/{path.name}"
        flavors = ("stock", "nightly") if path.name == "launch.cpp" else ("nightly",)
        out += [Unit(name, f) for f in flavors]
    out += [Unit("bindings/sycl_bindings.cpp", f, pybind=True) for f in ("stock", "nightly")]
    out += [Unit(f"bindings/{f}_module.cpp", f, pybind=True) for f in ("stock", "nightly")]
    return out


def clang_version(clang: str) -> tuple[int, str] | None:
    try:
        proc = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (proc.stdout.splitlines() or [""])[0]
    m = re.search(r"clang version (\d+)\.", first)
    return (int(m.group(1)), first.strip()) if proc.returncode == 0 and m else None


def find_clang() -> tuple[str, int, str] | None:
    """($TQ_SYCL_CLANG, else the newest clang++-NN on PATH, else clang++), if its major >= CLANG_MIN."""
    if os.environ.get(CLANG_ENV):
        cands = [os.environ[CLANG_ENV]]
    else:
        cands = [c for n in range(40, CLANG_MIN - 1, -1) if (c := shutil.which(f"clang++-{n}"))]
        cands += [c for c in [shutil.which("clang++")] if c]
    for cand in cands:
        ver = clang_version(cand)
        if ver and ver[0] >= CLANG_MIN:
            return cand, ver[0], ver[1]
    return None


def apt_clang_candidates() -> list[int]:
    """Majors of the ``clang-NN`` packages apt knows (newest first), from its local lists."""
    try:
        proc = subprocess.run(
            ["apt-cache", "search", "--names-only", "^clang-[0-9]+$"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    majors = {int(m.group(1)) for ln in proc.stdout.splitlines() if (m := re.match(r"clang-(\d+)\s", ln))}
    return sorted((n for n in majors if n >= CLANG_MIN), reverse=True)


def install_hint() -> str:
    return (
        f"install clang >= {CLANG_MIN} (Debian/Ubuntu: `sudo apt-get install clang-{CLANG_PREFERRED}`, or the "
        f"newest clang-NN with NN >= {CLANG_MIN} that `apt-cache search '^clang-[0-9]+$'` lists; "
        f"elsewhere LLVM's packages), or point ${CLANG_ENV} at a clang++"
    )


@dataclass
class Result:
    unit: Unit
    view: str
    rc: int
    seconds: float
    output: str
    errors: list[str] = field(default_factory=list)
    warnings: int = 0


def command(clang: str, unit: Unit, view: str, csrc: Path, sycl_include: str, extra_inc: list[str]) -> list[str]:
    cmd = [clang, "-std=c++17", "-fsyntax-only", "-fno-color-diagnostics", "-ferror-limit=50", *VIEWS[view]]
    cmd += ['-DTQ_SYCL_VERSION="0+syntax"', "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING", *FLAVOR_DEFINES[unit.flavor]]
    # the repo's include dirs as the CMake target has them; the SYCL (and pybind11, Python)
    # headers as system headers, so that only warnings from tq's own sources are counted
    cmd += [f"-I{csrc / 'include'}", f"-I{csrc}", f"-I{csrc / 'bindings'}"]
    cmd += ["-isystem", sycl_include]
    if unit.pybind:
        for inc in extra_inc:
            cmd += ["-isystem", inc]
    return [*cmd, str(csrc / unit.source)]


def run_one(cmd: list[str], unit: Unit, view: str) -> Result:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    errors = [ln for ln in out.splitlines() if " error: " in ln or ln.startswith("fatal error")]
    warnings = sum(1 for ln in out.splitlines() if " warning: " in ln)
    return Result(unit, view, proc.returncode, time.monotonic() - t0, out, errors, warnings)


def probe_device(clang: str, sycl_include: str, scratch: Path) -> tuple[bool, str]:
    """Whether the device view can parse ``<sycl/sycl.hpp>`` at all (first error if not)."""
    scratch.mkdir(parents=True, exist_ok=True)
    src = scratch / "probe_device.cpp"
    src.write_text("#include <sycl/sycl.hpp>\n")
    cmd = [clang, "-std=c++17", "-fsyntax-only", "-fno-color-diagnostics", *VIEWS["device"]]
    cmd += ["-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING", "-isystem", sycl_include, str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    errs = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "error:" in ln]
    n = sum(1 for ln in errs if " error: " in ln)
    first = errs[0].replace(sycl_include + "/", "") if errs else ""
    return proc.returncode == 0, f"{n}+ errors in the headers, first: {first}" if errs else ""


def check_all(
    clang: str, csrc: Path, sycl_include: str, extra_inc: list[str], views: list[str], jobs: int
) -> list[Result]:
    todo = [(u, v) for v in views for u in units(csrc)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = [pool.submit(run_one, command(clang, u, v, csrc, sycl_include, extra_inc), u, v) for u, v in todo]
        return [f.result() for f in futs]


def table(results: list[Result], device_note: str) -> str:
    rows = [("source", "flavor", "view", "result", "warnings", "seconds")]
    for r in results:
        res = "ok" if r.rc == 0 else f"FAIL ({len(r.errors)} errors)"
        rows.append((r.unit.source, r.unit.flavor, r.view, res, str(r.warnings), f"{r.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if device_note:
        lines.append(f"(every source, device view: not checked: {device_note})")
    return "\n".join(lines)


def jobs_default() -> int:
    raw = os.environ.get(JOBS_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else min(2, os.cpu_count() or 1)
