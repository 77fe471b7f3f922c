"""Where the attention kernel's inner loop spends its instructions, without a GPU.

Compiles ``tq_triton``'s attention kernel for ``sm_90`` with the Triton that is installed
(install the GPU machine's version for numbers that match it: the H200 machines run
Triton 3.6, and 3.9 generates very different code), finds the innermost loop that holds
the matrix instructions in the SASS, and attributes its instructions to source lines
through the line table. Example, the shipped H200 decode configuration::

    pip install --target /tmp/t36 triton==3.6.0
    PYTHONPATH=/tmp/t36:packages/tq-core/src:packages/tq-triton/src \\
        python3 docs/perf/scripts/static_loop.py --preset turboquant_k3v4_nc --block-kv 32 --warps 1

``--gluon 1`` counts the explicit-layout kernel (nvidia/gluon_kernel.py) instead, with
``--wgmma 1`` Hopper's warpgroup products (64 rows).
Static counts rank the work in a loop; they do not predict time (docs/perf/h200.md).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import inspect
import math
import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import tq_core
from tq_triton.attention.plan import kernel_constexprs
from tq_triton.tuning import AttentionConfig

# the attention package's kernel module (tq_triton/attention/kernel.py)
KERNEL = importlib.import_module("tq_triton.attention.kernel")
# where the line table's file names are looked up: the attention package, the NVIDIA kernels'
# package (the Gluon kernel), then tq_triton
TQ_TRITON = Path(KERNEL.__file__).parent.parent
SOURCE_DIRS = (TQ_TRITON / "attention", TQ_TRITON / "nvidia", TQ_TRITON)
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
INSTR = re.compile(r"\s*/\*([0-9a-f]{4,6})\*/\s+(.*?);")
LABEL = re.compile(r"\s*(\.L_x_\d+):")
LINE = re.compile(r'//## File "([^"]+)", line (\d+)')


def compile_kernel(args: argparse.Namespace):
    p = tq_core.get_preset(args.preset)
    lay = p.block_layout(args.head_dim, 16, args.kv_heads)
    # the constexprs as the launcher passes them on an NVIDIA GPU (attention/plan.py); 3- and
    # 4-bit codebook keys are looked up in a register table (KEY_LUT: plan.table_keys)
    cfg = AttentionConfig(block_kv=args.block_kv, num_stages=args.stages, prefetch=args.prefetch)
    consts = kernel_constexprs(
        p,
        p.kernel_fields(lay).constexprs(),
        cfg,
        args.group,
        args.group * args.kv_heads,
        args.splits,
        args.block_q,
        saturate_query=False,
    )
    if args.table_keys and consts["KEY_POLY"]:
        # 3-bit keys looked up in the register table instead of key_poly's polynomial
        consts["KEY_POLY"], consts["KEY_LUT"] = False, True
    if args.gather:
        # every codebook gathered one code at a time instead of through the plan's tables
        consts["KEY_LUT"] = consts["KEY_POLY"] = consts["VALUE_POLY"] = False
    table = consts["KEY_LUT"]
    params = list(inspect.signature(KERNEL.attention_kernel.fn).parameters)
    # the calibrated formats' float32 vectors: the pointers between split_programs and the
    # value codebook (the launcher passes LayerCalibration.kernel_vectors() there)
    calibration = {name: "*fp32" for name in params[params.index("split_programs") + 1 : params.index("VCentroids")]}
    types = {
        "Q": "*bf16",
        "Cache": "*u8",
        "BlockTable": "*i32",
        "SeqLens": "*i32",
        "QueryStart": "*i32",
        "Centroids": "*fp32" if p.key_is_fp8 else ("*i32" if table else "*fp16"),
        "Out": "*bf16",
        "Partial": "*fp32",
        "Lse": "*fp32",
        "q_mul": "fp32",
        "q_scale": "fp32",
        **calibration,
        "VCentroids": "*fp16",
    }
    sig, cx, attrs = {}, {}, {}
    for i, name in enumerate(params):
        if name in consts:
            sig[name] = "constexpr"
            cx[(i,)] = consts[name]
            continue
        sig[name] = types.get(name, "i64" if name == "stride_blk" else "i32")
        # as the launcher specialises them: 16-byte aligned pointers, strides divisible by 16
        if sig[name].startswith("*") or name.startswith("stride"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=KERNEL.attention_kernel, signature=sig, constexprs=cx, attrs=attrs)
    opts = {"num_warps": args.warps, "num_stages": args.stages}
    if args.max_registers:
        opts["maxnreg"] = args.max_registers
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


Row = tuple[int, tuple[str, int] | None, str, str]


def disassemble(cubin: bytes) -> tuple[list[Row], dict[str, int]]:
    """(offset, (file, line), opcode, text) per instruction, from nvdisasm with line info,
    and the offset of each branch label."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([BIN / "nvdisasm", "-g", "-c", f.name], capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    rows, labels, pending, where = [], {}, [], None
    for line in out.stdout.splitlines():
        if m := LINE.search(line):
            where = (Path(m.group(1)).name, int(m.group(2)))
        elif m := LABEL.match(line):
            pending.append(m.group(1))
        elif m := INSTR.match(line):
            off = int(m.group(1), 16)
            text = m.group(2)
            op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]
            rows.append((off, where, op, text))
            labels.update(dict.fromkeys(pending, off))
            pending = []
    return rows, labels


def inner_loop(rows: list[Row], labels: dict[str, int]) -> list[Row] | None:
    """The shortest backward-branch body that contains a matrix instruction."""
    best = None
    for off, _, _, text in rows:
        m = re.search(r"BRA .*?(\.L_x_\d+)", text)
        if not m or labels.get(m.group(1), off) >= off:
            continue
        start = labels[m.group(1)]
        body = [r for r in rows if start <= r[0] <= off]
        if any(r[2].startswith(("HMMA", "HGMMA")) for r in body) and (best is None or len(body) < len(best)):
            best = body
    return best


def registers(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([BIN / "cuobjdump", "--dump-resource-usage", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+) STACK:(\d+)", out.stdout)
    return f"registers {m.group(1)}, stack {m.group(2)} bytes" if m else "registers unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    presets = sorted({**tq_core.PRESETS, **tq_core.CALIBRATED_PRESETS})
    ap.add_argument("--preset", default="turboquant_k3v4_nc", choices=presets)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--group", type=int, default=4, help="q heads per kv head (a power of two)")
    ap.add_argument("--block-q", type=int, default=4, help="query tokens per tile (rows = group x block-q >= 16)")
    ap.add_argument("--block-kv", type=int, default=32)
    ap.add_argument("--warps", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=1)
    ap.add_argument("--stages", type=int, default=1)
    ap.add_argument("--splits", type=int, default=33)
    ap.add_argument("--max-registers", type=int, default=0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument(
        "--gather",
        action="store_true",
        help="gather 3- and 4-bit codebooks one code at a time instead of reading them through the plan's "
        "tables (plan.table_keys)",
    )
    ap.add_argument(
        "--table-keys",
        action="store_true",
        help="3-bit keys looked up in key_lut's register table instead of decoded by key_poly's "
        "polynomial (plan.poly_keys)",
    )
    ap.add_argument(
        "--gluon",
        type=int,
        default=0,
        choices=(0, 1),
        help="1: the explicit-layout kernel (fp8 or 3-bit keys, 4-bit values; one warp per 16 rows: --warps, "
        "--prefetch, --stages do not apply)",
    )
    ap.add_argument("--wgmma", type=int, default=0, choices=(0, 1), help="with --gluon 1: Hopper's warpgroup products")
    args = ap.parse_args()
    if args.group * args.block_q < 16 or not math.log2(args.group).is_integer():
        ap.error("rows (group x block-q) must be >= 16 and group a power of two")

    if args.gluon:
        from tq_triton.nvidia.gluon_launch import compile_gluon

        kernel = compile_gluon(
            args.preset,
            args.group,
            args.block_q,
            args.block_kv,
            args.head_dim,
            args.splits,
            maxnreg=args.max_registers,
            wgmma=bool(args.wgmma),
        )
        args.warps = args.group * args.block_q // 16
    else:
        kernel = compile_kernel(args)
    rows, labels = disassemble(kernel.asm["cubin"])
    loop = inner_loop(rows, labels)
    if loop is None:
        raise SystemExit("no loop with matrix instructions found")
    per_line = collections.Counter(r[1] for r in loop)
    ops = collections.defaultdict(collections.Counter)
    for _, where, op, _ in loop:
        ops[where][op] += 1
    tokens_per_warp = args.block_kv / args.warps
    print(
        f"triton {triton.__version__}, sm_90: {args.preset}, {args.block_kv}-token tiles, {args.warps} warp(s), "
        f"{args.group * args.block_q} rows; {registers(kernel.asm['cubin'])}"
    )
    print(f"inner loop: {len(loop)} instructions per warp per tile, {len(loop) / tokens_per_warp:.1f} per token\n")
    for where, n in per_line.most_common(args.top):
        text = ""
        found = [d / where[0] for d in SOURCE_DIRS if where and (d / where[0]).exists()]
        if found:
            text = found[0].read_text().splitlines()[where[1] - 1].strip()[:64]
        label = f"{where[0]}:{where[1]}" if where else "(no line)"
        common = ", ".join(f"{k} {v}" for k, v in ops[where].most_common(3))
        print(f"{n:6d} {100 * n / len(loop):5.1f}%  {label:18s} {text:64s} {common}")


if __name__ == "__main__":
    main()
