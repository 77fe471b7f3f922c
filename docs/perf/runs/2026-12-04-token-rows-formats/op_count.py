"""The token-rows kernel's tile loop by SASS opcode, per token and warp, side by side for
several variants (the same compile and loop rule as ../2026-12-04-column-tiles/static_count.py,
one column tile, 4 q heads per kv head, 32 splits). Usage:
``python3 op_count.py PRESET,BLOCK_KV,NORM_MMA ...`` with Triton 3.6 on the path
(``PYTHONPATH=/tmp/t36:packages/tq-core/src:packages/tq-triton/src``)."""

from __future__ import annotations

import importlib.util
import os
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

if __name__ == "__main__":
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    per_token = {}
    for arg in sys.argv[1:]:
        preset, block_kv, norm_mma = arg.split(",")
        kernel = compile_token_rows(preset, 4, int(block_kv), 32, columns=8, norm_mma=bool(int(norm_mma)))
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(kernel.asm["cubin"])
            f.flush()
            sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", f.name], capture_output=True, text=True)
        counts = _mod.tile_loop(sass.stdout)
        per_token[arg] = {op: n / int(block_kv) for op, n in counts.items()}
    ops = sorted(set().union(*per_token.values()), key=lambda o: -max(c.get(o, 0) for c in per_token.values()))
    print("opcode".ljust(24) + "".join(a.ljust(28) for a in per_token))
    for op in ops:
        print(op.ljust(24) + "".join(f"{c.get(op, 0):6.2f}".ljust(28) for c in per_token.values()))
