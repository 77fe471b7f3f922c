# ruff: noqa
"""Registers, stack and spills of the Gluon kernel compiled for sm_90 on a CPU (argv:
PRESET,GROUP,BLOCK_Q,BLOCK_KV,HEAD_DIM,SPLITS[,MAXNREG] ...)."""

import sys, re, subprocess, tempfile, os
from pathlib import Path
import triton
from tq_triton.attention.gluon_launch import compile_gluon

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
cfgs = [a.split(",") for a in sys.argv[1:]] or [
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16),
    ("turboquant_k8v4", 4, 8, 32, 128, 16),
    ("turboquant_k8v4", 8, 8, 64, 128, 16),
    ("turboquant_k3v4_nc", 8, 8, 64, 128, 16),
    ("turboquant_k3v4_nc", 4, 1, 32, 128, 0),
]
for c in cfgs:
    p, g, bq, bkv, d, sp = c[0], *map(int, c[1:6])
    mr = int(c[6]) if len(c) > 6 else 0
    k = compile_gluon(p, g, bq, bkv, d, max(sp, 1), maxnreg=mr)
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    out = subprocess.run([str(BIN / "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    sass = subprocess.run([str(BIN / "cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    n = sum(1 for l in sass.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,6}\*/", l))
    ldl = sass.count("LDL")
    stl = sass.count("STL")
    print(p[11:], g, bq, bkv, sp, mr, m.group(0) if m else out[:200], "instr", n, "LDL", ldl, "STL", stl, flush=True)
    os.unlink(f.name)
