"""Static instruction counts of the token-rows kernel's tile loop, per token and warp: the
kernel compiled for sm_90 on any machine (``gluon_launch.compile_token_rows``, 4 q heads per
kv head, 32 splits), its SASS from ``cuobjdump -sass``, the innermost backward branch taken
as the tile loop. Usage: ``python3 static_count.py PRESET,BLOCK_KV ...``, with the Triton the
device runs on the path (``pip install --target /tmp/t36 triton==3.6.0``, ``PYTHONPATH``)."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile

import triton

from tq_triton.attention.gluon_launch import compile_token_rows


def tile_loop(sass: str) -> collections.Counter:
    ins = []
    for line in sass.splitlines():
        if m := re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);", line):
            ins.append((int(m[1], 16), m[2].strip()))
    loops = []
    for addr, text in ins:
        if (m := re.search(r"BRA.*?0x([0-9a-f]+)", text)) and int(m[1], 16) < addr:
            loops.append((int(m[1], 16), addr))
    lo, hi = min(loops, key=lambda x: x[1] - x[0])
    return collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", text).split()[0] for addr, text in ins if lo <= addr <= hi)


if __name__ == "__main__":
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for arg in sys.argv[1:]:
        preset, block_kv = arg.split(",")
        kernel = compile_token_rows(preset, 4, int(block_kv), 32)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(kernel.asm["cubin"])
            f.flush()
            run = [os.path.join(tools, "cuobjdump")]
            sass = subprocess.run([*run, "-sass", f.name], capture_output=True, text=True).stdout
            usage = subprocess.run([*run, "-res-usage", f.name], capture_output=True, text=True).stdout
        counts = tile_loop(sass)
        total = sum(counts.values())
        regs = re.search(r"REG:(\d+)", usage)
        print(
            f"{preset} {block_kv}-token tiles: {total} instructions, {total / int(block_kv):.1f} per token,"
            f" {regs[1] if regs else '?'} registers; {counts.most_common(8)}"
        )
