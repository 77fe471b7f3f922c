"""Toolchain discovery (what `tq info` shows) and the ELF reader behind the soname report."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tq_sycl import elf, toolchain
from tq_sycl.extensions import module_file


def fake_compiler(path: Path, banner: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\nprint({banner!r})\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_describe_without_toolchains(monkeypatch, tmp_path):
    monkeypatch.delenv("ONEAPI_ROOT", raising=False)
    monkeypatch.delenv("TQ_SYCL_NIGHTLY_ROOT", raising=False)
    monkeypatch.setattr(toolchain, "DEFAULT_ONEAPI", tmp_path / "no-oneapi")
    monkeypatch.setenv("PATH", str(tmp_path))
    info = toolchain.describe()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())
    assert info["icpx"].startswith("not found (looked for ")
    assert str(tmp_path / "no-oneapi") in info["icpx"]
    assert info["nightly_root"] == "not set (TQ_SYCL_NIGHTLY_ROOT)"
    assert info["module_host"].endswith(".so")
    assert info["module_stock"] == "not built"


def test_describe_finds_both_toolchains(monkeypatch, tmp_path):
    oneapi = tmp_path / "oneapi"
    fake_compiler(
        oneapi / "compiler/latest/bin/icpx", "Intel(R) oneAPI DPC++/C++ Compiler 2025.3.0 (2025.3.0.20251010)"
    )
    (oneapi / "compiler/latest/lib").mkdir()
    (oneapi / "compiler/latest/lib/libsycl.so.8").write_bytes(b"")
    nightly = tmp_path / "nightly"
    fake_compiler(nightly / "bin/clang++", "clang version 22.0.0git (https://github.com/intel/llvm abcdef)")
    (nightly / "lib").mkdir()
    (nightly / "lib/libsycl.so.9").write_bytes(b"")
    (nightly / "lib/libsycl.so.9.0.0").write_bytes(b"")  # the real file behind the soname
    monkeypatch.setenv("ONEAPI_ROOT", str(oneapi))
    monkeypatch.setenv("TQ_SYCL_NIGHTLY_ROOT", str(nightly))
    info = toolchain.describe()
    assert info["icpx"] == str(oneapi / "compiler/latest/bin/icpx")
    assert info["icpx_version"].startswith("Intel(R) oneAPI DPC++/C++ Compiler 2025.3.0")
    assert info["icpx_libsycl"] == "libsycl.so.8"
    assert info["nightly_version"].startswith("clang version 22.0.0git")
    assert info["nightly_libsycl"] == "libsycl.so.9"
    env = toolchain.nightly_env()
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(nightly / "lib")


def test_elf_reader_on_the_host_module():
    path = module_file("_host")
    assert path is not None
    deps = elf.needed(path)
    assert any(d.startswith("libstdc++.so") or d.startswith("libc.so") for d in deps), deps
    assert elf.libsycl_soname(path) is None  # the host build must not link SYCL


def test_elf_reader_on_python_itself():
    # the interpreter is an ELF executable on Linux: needed() must parse it or say it is static
    deps = elf.needed(Path(sys.executable).resolve())
    assert isinstance(deps, list)
    assert all(isinstance(d, str) and d for d in deps)


def test_elf_reader_rejects_other_files(tmp_path):
    bad = tmp_path / "x.so"
    bad.write_bytes(b"not an elf file at all, just text" * 4)
    with pytest.raises(elf.ELFError, match="not an ELF file"):
        elf.needed(bad)
