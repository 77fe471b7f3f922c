"""Compile the Gluon attention kernel for sm_90 and report what its PTX holds (a helper of
test_gluon_kernel.py, run in its own process without TRITON_INTERPRET).

Usage: ``python tqt_gluon_compile.py
PRESET,GROUP,BLOCK_Q,BLOCK_KV,HEAD_DIM,SPLITS[,BUFFERS[,BALANCE[,WGMMA[,BF16[,SKIP]]]]] ...``;
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
        # bf16 partial outputs: float32 pairs rounded to bf16 pairs
        "bf16_pairs": "cvt.rn.bf16x2.f32" in ptx,
    }


if __name__ == "__main__":
    out = []
    for arg in sys.argv[1:]:
        preset, *rest = arg.split(",")
        group, block_q, block_kv, head_dim, splits, *extra = (int(x) for x in rest)
        buffers = extra[0] if extra else 1
        balance = extra[1] if len(extra) > 1 else 0
        wgmma = extra[2] if len(extra) > 2 else 0
        bf16 = extra[3] if len(extra) > 3 else 0
        skip = extra[4] if len(extra) > 4 else 0
        kernel = compile_gluon(
            preset,
            group,
            block_q,
            block_kv,
            head_dim,
            splits,
            buffers=buffers,
            balance=bool(balance),
            wgmma=bool(wgmma),
            bf16_partials=bool(bf16),
            skip_empty=bool(skip),
        )
        out.append(checks(kernel.asm["ptx"]))
    print(json.dumps(out))
