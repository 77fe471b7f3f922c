"""The DT_NEEDED entries of an ELF shared object, read without readelf or a shell.

``tq info`` uses it to say which libsycl soname each compiled module links: the stock
build must link torch-XPU's libsycl.so.8, the nightly build links libsycl.so.9.
"""

from __future__ import annotations

import struct
from pathlib import Path

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB = 0, 1, 5


class ELFError(ValueError):
    """Not an ELF file this reader understands."""


def needed(path: str | Path) -> list[str]:
    """Sonames the object at ``path`` asks the dynamic loader for, in order."""
    data = Path(path).read_bytes()
    if len(data) < 0x40 or data[:4] != b"\x7fELF":
        raise ELFError(f"{path}: not an ELF file")
    is64 = {1: False, 2: True}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if is64 is None or order is None:
        raise ELFError(f"{path}: unknown ELF class/byte order {data[4]}/{data[5]}")
    if is64:
        (phoff,) = struct.unpack_from(order + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36)
    else:
        (phoff,) = struct.unpack_from(order + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x2A)

    loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    dynamic: tuple[int, int] | None = None  # (offset, size)
    for i in range(phnum):
        base = phoff + i * phentsize
        if is64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(order + "IIQQQQ", data, base)
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(order + "IIIII", data, base)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_filesz, p_offset))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []  # statically linked

    entry = struct.Struct(order + ("qQ" if is64 else "iI"))
    names: list[int] = []
    strtab_vaddr = None
    off, size = dynamic
    for pos in range(off, min(off + size, len(data) - entry.size + 1), entry.size):
        tag, val = entry.unpack_from(data, pos)
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            names.append(val)
        elif tag == DT_STRTAB:
            strtab_vaddr = val
    if strtab_vaddr is None:
        raise ELFError(f"{path}: dynamic section without a string table")
    strtab = next((o + strtab_vaddr - v for v, n, o in loads if v <= strtab_vaddr < v + n), None)
    if strtab is None:
        raise ELFError(f"{path}: string table outside every loaded segment")

    def cstr(at: int) -> str:
        end = data.index(b"\0", at)
        return data[at:end].decode("utf-8", "replace")

    return [cstr(strtab + n) for n in names]


def libsycl_soname(path: str | Path) -> str | None:
    """The libsycl soname ``path`` links, or None."""
    return next((n for n in needed(path) if n.startswith("libsycl.so")), None)
