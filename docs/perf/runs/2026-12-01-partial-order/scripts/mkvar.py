# ruff: noqa
"""Writes ablation copies of gluon_kernel.py into the package (run from the repo root)."""

import re
from pathlib import Path

src_p = Path("packages/tq-triton/src/tq_triton/attention/gluon_kernel.py")
src = src_p.read_text()
lines = src.splitlines(keepends=True)


def write(name, text):
    assert text != src, name
    (src_p.parent / f"gluon_kernel_{name}.py").write_text(text)


import subprocess

write("head", subprocess.run(["git", "show", "HEAD:" + str(src_p)], capture_output=True, text=True, check=True).stdout)
# no partial store (timing only)
write("nostore", src.replace("gl.store(Partial + slot[:, None] * D + dcol[None, :], o, mask=row_ok[:, None])", "pass"))
# no Hadamard (timing only)
write(
    "nohad",
    src.replace("            q = _butterflies(q, BLOCK_M, D, 0, LOG2_D - 1)\n", "").replace(
        "q = _butterflies(gl.convert_layout(q, QE), BLOCK_M, D, LOG2_D - 1, LOG2_D)", "q = gl.convert_layout(q, QE)"
    ),
)
# no tiles (fixed costs only; timing only)
write("noloop", src.replace("hi = gl.minimum(kv_hi, seq_len - q_len + gl.minimum(qc + BLOCK_Q, q_len))", "hi = kv_lo"))
# first tile's loads issued before the query's (correct)
a = src.index("    for qc in range(0, q_len, BLOCK_Q):\n") + len("    for qc in range(0, q_len, BLOCK_Q):\n")
b = src.index("        m = gl.arange(0, BLOCK_M, layout=ROW)\n")
c = src.index(
    "        if BUFFERS == 2:\n            _barrier()  # every warp is done with the previous chunk's buffers"
)
qpart = src[a:b]
first = src[src.index("        hi = gl.minimum(kv_hi", b) : c]
mid = src[b : src.index("        hi = gl.minimum(kv_hi", b)]
write("early", src[:a] + first + qpart + mid + src[c:])
