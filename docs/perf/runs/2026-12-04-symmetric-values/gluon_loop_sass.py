"""SASS instructions in the Gluon attention kernel's tile loop, compiled on a CPU machine.

Compiles ``tq_triton``'s Gluon kernel for ``sm_90a`` with the installed Triton
(``gluon_launch.compile_gluon``), assembles it with the ``ptxas`` Triton ships, and counts
the instructions of the smallest loop that holds the matrix products. Each argument is
``PRESET,GROUP,BLOCK_Q,BLOCK_KV,HEAD_DIM,SPLITS[,BALANCE,WGMMA,SKIP_EMPTY,INT_VALUES]``
(runs/2026-12-04-folded-norm/loop_sass.py with ``int_values``)::

    PYTHONPATH=packages/tq-core/src:packages/tq-triton/src \\
        python3 docs/perf/runs/2026-12-04-symmetric-values/gluon_loop_sass.py tq_k4v4,4,4,32,128,33

With two or more arguments it also prints the opcodes whose counts differ most between the
first two. Counts rank work; they do not predict time.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton

from tq_triton.attention.gluon_launch import compile_gluon

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def loop_opcodes(spec: str) -> collections.Counter:
    preset, *rest = spec.split(",")
    group, block_q, block_kv, head_dim, splits, *extra = (int(x) for x in rest)
    balance, wgmma, skip, int_values = (bool(x) for x in [*extra, 0, 0, 0, 0][:4])
    k = compile_gluon(
        preset,
        group,
        block_q,
        block_kv,
        head_dim,
        splits,
        balance=balance,
        wgmma=wgmma,
        skip_empty=skip,
        int_values=int_values,
    )
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        ptx.write_text(k.asm["ptx"])
        subprocess.run([str(BIN / "ptxas-blackwell"), "-arch=sm_90a", str(ptx), "-o", str(cubin)], check=True)
        sass = subprocess.run([str(BIN / "nvdisasm"), "-c", str(cubin)], capture_output=True, text=True, check=True)
    lines = sass.stdout.splitlines()
    labels = {ln.strip().rstrip(":"): i for i, ln in enumerate(lines) if re.match(r"\s*\.L_x_\d+:", ln)}
    loops = []
    for i, ln in enumerate(lines):
        m = re.search(r"BRA\s.*?(\.L_x_\d+)", ln)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            body = lines[labels[m.group(1)] : i + 1]
            if any("HMMA" in x or "HGMMA" in x for x in body):
                loops.append(body)
    ops: collections.Counter = collections.Counter()
    for ln in min(loops, key=len):
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", ln)
        if m:
            ops[m.group(1)] += 1
    return ops


def main() -> None:
    res = {}
    for spec in sys.argv[1:]:
        res[spec] = ops = loop_opcodes(spec)
        n = sum(ops.values())
        print(f"{spec}: {n} instructions in the tile loop, LDL {ops['LDL']}, STL {ops['STL']}", flush=True)
    if len(res) >= 2:
        a, b = list(res.values())[:2]
        for op in sorted(set(a) | set(b), key=lambda o: -abs(b[o] - a[o]))[:16]:
            print(f"{op:10} {a[op]:6} {b[op]:6} {b[op] - a[op]:+6}")


if __name__ == "__main__":
    main()
