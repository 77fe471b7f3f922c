"""The store kernel's SASS per token, attributed to source lines (sm_90, no GPU needed).

Run from the repository root with tq-core, tq-triton and ``docs/perf/scripts`` importable:

    PYTHONPATH=/tmp/t36:packages/tq-core/src:packages/tq-triton/src:docs/perf/scripts \\
        python sstore.py --preset tq_k4v3 --maxnreg 96 [--by op] [--show LINES]
"""

from __future__ import annotations

import argparse
import collections
import importlib
import inspect

import static_loop
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import tq_core
from tq_triton.tuning import StoreConfig

STORE = importlib.import_module("tq_triton.store")
POINTERS = {"K": "*bf16", "V": "*bf16", "Cache": "*u8", "SlotMapping": "*i64", "Positions": "*i64"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tq_k4v3")
    ap.add_argument("--block-t", type=int, default=16)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--maxnreg", type=int, default=0)
    ap.add_argument("--search", type=int, default=1)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by", default="line", choices=("line", "op"))
    ap.add_argument("--show", default="", help="comma list of store.py lines whose SASS to print")
    a = ap.parse_args()
    p = tq_core.get_preset(a.preset)
    fields = p.kernel_fields(p.block_layout(128, 16, 8)).constexprs()
    cfg = StoreConfig(block_t=a.block_t, num_warps=a.warps, code_search=a.search)
    consts = STORE.kernel_constexprs(p, fields, cfg, False)
    sig, cx, attrs = {}, {}, {}
    for i, (name, prm) in enumerate(inspect.signature(STORE._store_kernel.fn).parameters.items()):
        if name in consts or prm.default is not inspect.Parameter.empty:
            sig[name] = "constexpr"
            cx[(i,)] = consts.get(name, prm.default)
            continue
        ty = POINTERS.get(name) or ("*fp32" if name[0].isupper() else ("i64" if name == "stride_blk" else "i32"))
        sig[name] = ty
        if ty.startswith("*") or name.startswith("stride"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=STORE._store_kernel, signature=sig, constexprs=cx, attrs=attrs)
    opts = {"num_warps": a.warps} | ({"maxnreg": a.maxnreg} if a.maxnreg else {})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    rows, _ = static_loop.disassemble(k.asm["cubin"])
    per = a.warps / a.block_t
    local = sum(1 for r in rows if r[2] in ("LDL", "STL"))
    print(a.preset, cfg, static_loop.registers(k.asm["cubin"]), f"sass per token {len(rows) * per:.1f}, local {local}")
    count = collections.Counter(r[1] if a.by == "line" else r[2] for r in rows)
    for key, n in count.most_common(a.top):
        print(f"{n * per:7.1f}  {key}")
    show = {int(x) for x in a.show.split(",") if x}
    for _, where, _, text in rows:
        if where and where[0] == "store.py" and where[1] in show:
            print(where[1], text)


if __name__ == "__main__":
    main()
