"""Static instruction counts of the token-rows kernel's tile loop, per token and warp, with
``int_values`` (tq_k4v4's symmetric values from their codes' bits) on and off: the kernel
compiled for sm_90 on any machine (``gluon_launch.compile_token_rows``, 4 q heads per kv head,
32 splits), its SASS from ``cuobjdump -sass``, the innermost backward branch taken as the
tile loop (runs/2026-12-04-token-rows/static_count.py's rule). Usage:
``python3 static_count.py PRESET,BLOCK_KV[,COLUMNS[,NORM_MMA[,INT_VALUES]]] ...`` with the
Triton the device runs on the path (``pip install --target /tmp/t36 triton==3.6.0``,
``PYTHONPATH``)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton

from tq_triton.attention.gluon_launch import compile_token_rows

_spec = importlib.util.spec_from_file_location(
    "token_rows_static_count", Path(__file__).parent.parent / "2026-12-04-token-rows" / "static_count.py"
)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
tile_loop = _mod.tile_loop

if __name__ == "__main__":
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for arg in sys.argv[1:]:
        preset, block_kv, *rest = arg.split(",")
        columns, norm_mma, int_values = [*(int(x) for x in rest), *(8, 0, 0)[len(rest) :]]
        kernel = compile_token_rows(
            preset, 4, int(block_kv), 32, columns=columns, norm_mma=bool(norm_mma), int_values=bool(int_values)
        )
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(kernel.asm["cubin"])
            f.flush()
            run = [os.path.join(tools, "cuobjdump")]
            sass = subprocess.run([*run, "-sass", f.name], capture_output=True, text=True).stdout
            usage = subprocess.run([*run, "-res-usage", f.name], capture_output=True, text=True).stdout
        counts = tile_loop(sass)
        total = sum(counts.values())
        regs = re.search(r"REG:(\d+)", usage)
        stack = re.search(r"STACK:(\d+)", usage)
        where = f"{preset} {block_kv}-token tiles, {columns} columns, norm_mma {norm_mma}, int_values {int_values}"
        print(
            f"{where}: {total / int(block_kv):.1f} instructions per token,"
            f" {regs[1] if regs else '?'} registers, {stack[1] if stack else '?'} bytes of stack",
            flush=True,
        )
