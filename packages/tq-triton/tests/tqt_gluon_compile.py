"""Compile the Gluon attention kernel for sm_90 and report what its PTX holds (a helper of
test_gluon_kernel.py, run in its own process without TRITON_INTERPRET).

Usage: ``python tqt_gluon_compile.py
PRESET,GROUP,BLOCK_Q,BLOCK_KV,HEAD_DIM,SPLITS[,BALANCE[,WGMMA[,SKIP]]] ...``;
prints one JSON list, an object of checks per configuration."""

from __future__ import annotations

import json
import sys

from tq_triton.attention.gluon_launch import compile_gluon


def checks(ptx: str) -> dict[str, bool]:
    return {
        "mma": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx,
        "wgmma": "wgmma.mma_async.sync.aligned" in ptx,
        "prmt": "prmt.b32" in ptx,
        "v4_shared_stores": "st.shared.v4" in ptx,
        "global_loads": "ld.global" in ptx,
        "global_stores": "st.global" in ptx,
    }


if __name__ == "__main__":
    out = []
    for arg in sys.argv[1:]:
        preset, *rest = arg.split(",")
        group, block_q, block_kv, head_dim, splits, *extra = (int(x) for x in rest)
        balance, wgmma, skip = (bool(x) for x in [*extra, 0, 0, 0][:3])
        kernel = compile_gluon(
            preset, group, block_q, block_kv, head_dim, splits, balance=balance, wgmma=wgmma, skip_empty=skip
        )
        out.append(checks(kernel.asm["ptx"]))
    print(json.dumps(out))
