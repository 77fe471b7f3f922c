"""Compile the Gluon attention kernel for sm_90 and report what its PTX holds (a helper of
test_gluon_kernel.py, run in its own process without TRITON_INTERPRET).

Usage: ``python tqt_gluon_compile.py
PRESET,GROUP,BLOCK_Q,BLOCK_KV,HEAD_DIM,SPLITS[,BALANCE[,WGMMA[,SKIP[,INT]]]] ...``;
prints one JSON list, an object of checks per configuration."""

from __future__ import annotations

import inspect
import json
import re
import sys

from tq_triton.nvidia.gluon_kernel import gluon_attention_kernel
from tq_triton.nvidia.gluon_launch import compile_gluon

# the kernel parameter that holds the centroid table (the constexprs, which have no PTX
# parameter, all come after it)
TABLE_PARAM = list(inspect.signature(gluon_attention_kernel.fn).parameters).index("Centroids")
# the calibrated formats' value table
VALUE_TABLE_PARAM = list(inspect.signature(gluon_attention_kernel.fn).parameters).index("VCentroids")


def _in_loop(lines: list[str]) -> list[bool]:
    """For each PTX line, whether its basic block lies in a loop, as LLVM's block comments
    say (``Loop Header``, ``in Loop: Header=...``, ``Parent Loop``, on the block's label
    line or the comment lines under it)."""
    out, inside, head = [], False, False
    for line in lines:
        if re.match(r"(\$L__BB\w+:|// %bb\.\d+:)", line):
            inside, head = "Loop" in line, True
        elif head and re.match(r"\s*//", line):
            inside = inside or "Loop" in line
        else:
            head = False
        out.append(inside)
    return out


def table_loads(ptx: str, index: int = TABLE_PARAM) -> tuple[int, int]:
    """The global loads that read through the pointer of parameter ``index`` (by default the
    centroid table's, or a pointer derived from it), and how many of them lie inside a loop."""
    lines = ptx.splitlines()
    param = re.compile(rf"ld\.param\.b64\s+(%rd\d+), \[\w+_param_{index}\];")
    derived = {m[1] for line in lines if (m := param.search(line))}
    grew = True
    while grew:  # 64-bit registers computed from a derived one, to a fixed point
        grew = False
        for line in lines:
            m = re.match(r"\s*[\w.]+\s+(%rd\d+),(.*);", line)
            if m and m[1] not in derived and derived & set(re.findall(r"%rd\d+", m[2])):
                derived.add(m[1])
                grew = True
    loads = [i for i, x in enumerate(lines) if "ld.global" in x and derived & set(re.findall(r"\[ ?(%rd\d+)", x))]
    in_loop = _in_loop(lines)
    return len(loads), sum(in_loop[i] for i in loads)


def checks(ptx: str) -> dict[str, bool | int]:
    loads, in_loop = table_loads(ptx)
    return {
        "mma": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx,
        "wgmma": "wgmma.mma_async.sync.aligned" in ptx,
        "prmt": "prmt.b32" in ptx,
        "v4_shared_stores": "st.shared.v4" in ptx,
        "global_loads": "ld.global" in ptx,
        "global_stores": "st.global" in ptx,
        "loops": ptx.count("Loop Header"),
        "table_loads": loads,
        "table_loads_in_loops": in_loop,
        "value_table_loads": table_loads(ptx, VALUE_TABLE_PARAM)[0],
    }


if __name__ == "__main__":
    out = []
    for arg in sys.argv[1:]:
        preset, *rest = arg.split(",")
        group, block_q, block_kv, head_dim, splits, *extra = (int(x) for x in rest)
        balance, wgmma, skip = (bool(x) for x in [*extra, 0, 0, 0][:3])
        kernel = compile_gluon(
            preset,
            group,
            block_q,
            block_kv,
            head_dim,
            splits,
            balance=balance,
            wgmma=wgmma,
            skip_empty=skip,
        )
        out.append(checks(kernel.asm["ptx"]))
    print(json.dumps(out))
