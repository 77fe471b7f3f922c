"""Toolchain discovery (what `tq info` shows) and the ELF reader behind the soname report."""

from __future__ import annotations

import os
import re
import shutil
import stat
import struct
import subprocess
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


def synthetic_elf(is64: bool, order: str, needed: list[str]) -> bytes:
    """A minimal ELF shared object with these DT_NEEDED entries, laid out by hand.

    One PT_LOAD maps the whole file at virtual address 0x10000 (so file offsets and
    addresses differ, as in real objects), one PT_DYNAMIC holds the dynamic entries.
    """
    base = 0x10000
    ehsize, phentsize = (0x40, 56) if is64 else (0x34, 32)
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n in needed)
    name_offsets = [1 + sum(len(n) + 1 for n in needed[:i]) for i in range(len(needed))]
    strtab_off = ehsize + 2 * phentsize
    dyn_off = strtab_off + len(strtab) + (-len(strtab)) % 8
    dyn_fmt = order + ("qQ" if is64 else "iI")
    entries = [(1, o) for o in name_offsets] + [(5, base + strtab_off), (0, 0)]
    dynamic = b"".join(struct.pack(dyn_fmt, tag, val) for tag, val in entries)
    size = dyn_off + len(dynamic)
    dyn_at, n = base + dyn_off, len(dynamic)
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if order == "<" else 2, 1]) + bytes(9)
    if is64:
        header = ident + struct.pack(order + "HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize, phentsize, 2, 0, 0, 0)
        load = struct.pack(order + "IIQQQQQQ", 1, 4, 0, base, base, size, size, 0x1000)
        dyn = struct.pack(order + "IIQQQQQQ", 2, 4, dyn_off, dyn_at, dyn_at, n, n, 8)
    else:
        header = ident + struct.pack(order + "HHIIIIIHHHHHH", 3, 3, 1, 0, ehsize, 0, 0, ehsize, phentsize, 2, 0, 0, 0)
        load = struct.pack(order + "IIIIIIII", 1, 0, base, base, size, size, 4, 0x1000)
        dyn = struct.pack(order + "IIIIIIII", 2, dyn_off, dyn_at, dyn_at, n, n, 4, 4)
    body = header + load + dyn + strtab
    return body + bytes(dyn_off - len(body)) + dynamic


@pytest.mark.parametrize(("is64", "order"), [(True, "<"), (False, "<"), (True, ">"), (False, ">")])
def test_elf_reader_on_hand_built_objects(tmp_path, is64, order):
    wanted = ["libsycl.so.9", "libstdc++.so.6", "libc.so.6"]
    path = tmp_path / "lib.so"
    path.write_bytes(synthetic_elf(is64, order, wanted))
    assert elf.needed(path) == wanted
    assert elf.libsycl_soname(path) == "libsycl.so.9"
    path.write_bytes(synthetic_elf(is64, order, []))
    assert elf.needed(path) == []
    assert elf.libsycl_soname(path) is None


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils' readelf is not installed")
@pytest.mark.parametrize("which", ["python", "host module"])
def test_elf_reader_agrees_with_readelf(which):
    path = Path(sys.executable).resolve() if which == "python" else module_file("_host")
    assert path is not None
    env = {**os.environ, "LC_ALL": "C"}  # readelf's English labels
    proc = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True, env=env)
    expected = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", proc.stdout)
    assert elf.needed(path) == expected


def test_elf_reader_rejects_other_files(tmp_path):
    bad = tmp_path / "x.so"
    bad.write_bytes(b"not an elf file at all, just text" * 4)
    with pytest.raises(elf.ELFError, match="not an ELF file"):
        elf.needed(bad)
