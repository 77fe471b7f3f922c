"""Compile the token-rows attention kernel for sm_90 and report what its PTX holds (a helper
of test_token_rows_kernel.py, run in its own process without TRITON_INTERPRET).

Usage: ``python tqt_token_rows_compile.py CONFIG ...``, each ``CONFIG``
``PRESET,GROUP,BLOCK_KV,SPLITS[,BALANCE[,COLUMNS]]``; prints one JSON
list, an object of checks per configuration."""

from __future__ import annotations

import json
import re
import sys

from tq_triton.nvidia.gluon_launch import compile_token_rows


def _tile_loop(lines: list[str]) -> list[bool]:
    """For each PTX line, whether its basic block lies in a loop nested in another (the tile
    loop inside the query-chunk loop), as LLVM's block comments say (``Depth=2``)."""
    out, depth = [], 0
    for line in lines:
        if m := re.search(r"Loop Header: Depth=(\d+)|in Loop: Header=\S+ Depth=(\d+)", line):
            depth = int(m[1] or m[2])
        elif re.match(r"(\$L__BB\w+:|// %bb\.\d+:)", line):
            depth = 0
        out.append(depth >= 2)
    return out


def checks(ptx: str) -> dict[str, int]:
    lines = ptx.splitlines()
    inner = _tile_loop(lines)
    shared = [("ld.shared" in x or "st.shared" in x or "ldmatrix" in x) for x in lines]
    return {
        "mma": ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
        "movmatrix": ptx.count("movmatrix.sync.aligned.m8n8.trans.b16"),
        "tile_loop_lines": sum(inner),
        "shared_in_tile_loop": sum(s and i for s, i in zip(shared, inner, strict=True)),
        "barriers_in_tile_loop": sum("bar.sync" in x and i for x, i in zip(lines, inner, strict=True)),
        "global_loads": ptx.count("ld.global"),
        "global_stores": ptx.count("st.global"),
    }


if __name__ == "__main__":
    out = []
    for arg in sys.argv[1:]:
        preset, *rest = arg.split(",")
        group, block_kv, splits, *extra = (int(x) for x in rest)
        balance, columns = [*extra, *(0, 8)[len(extra) :]]
        kernel = compile_token_rows(
            preset,
            group,
            block_kv,
            splits,
            balance=bool(balance),
            columns=columns,
        )
        out.append(checks(kernel.asm["ptx"]))
    print(json.dumps(out))
