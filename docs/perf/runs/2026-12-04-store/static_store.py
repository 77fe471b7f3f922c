"""Instructions per token of tq-triton's store kernel, compiled for sm_90 without a GPU.

Compiles ``tq_triton.store._store_kernel`` with the constexprs its launcher passes
(``store.kernel_constexprs``) for a preset at tq bench's store shape (head_dim 128, 8 kv
heads, 16-token blocks, bfloat16 keys and values) and each configuration named, then counts
PTX instructions (the kernel is straight-line: every thread runs each of them once) and,
where the Triton wheel ships ``nvdisasm``, SASS instructions and registers. Per token means
per warp times warps per program over tokens per program (``block_t``), so configurations
with other tiles compare. Static counts rank the work; they do not predict time.

    python static_store.py [--presets P,...] [--configs NAME,...] [--sass] [--json OUT]
    python static_store.py --same-as DIR   # the default kernel of another tq_triton tree

Configurations (``--configs``): ``table`` is the H200 table's entry (block_t 16, 4 warps,
binary search); the others are the candidates of ``cands.py`` (``CANDIDATES`` there).
``--same-as DIR`` compiles the ``table`` configuration of every preset also from the
tq_triton package under ``DIR`` (a checkout's ``packages/tq-triton/src``) in a subprocess
and reports whether the SASS is identical instruction for instruction.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import tq_core
from tq_triton.tuning import StoreConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cands import CANDIDATES, EVERY_PRESET

STORE = importlib.import_module("tq_triton.store")
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
SASS_LINE = re.compile(r"\s*/\*([0-9a-f]{4,6})\*/\s+(.*?);")
TABLE = StoreConfig(block_t=16, num_warps=4, code_search=1)
HEAD_DIM, HEADS, BLOCK_SIZE = 128, 8, 16


def configs() -> dict[str, StoreConfig]:
    return {"table": TABLE, **{name: replace(TABLE, **kw) for name, kw in CANDIDATES.items()}}


def compile_store(preset: str, cfg: StoreConfig):
    """The kernel as the launcher specialises it for ``preset`` and ``cfg`` (bfloat16 keys and
    values, 16-byte aligned pointers, strides divisible by 16)."""
    p = tq_core.get_preset(preset)
    fields = p.kernel_fields(p.block_layout(HEAD_DIM, BLOCK_SIZE, HEADS)).constexprs()
    consts = (
        STORE.kernel_constexprs(p, fields, cfg, torch.bfloat16)
        if hasattr(STORE, "kernel_constexprs")
        else dict(
            fields,
            NUM_BOUNDS=0 if p.key_is_fp8 else (1 << p.key_bits) - 1,
            BLOCK_T=cfg.block_t,
            CODE_SEARCH=bool(cfg.code_search),
            CALIBRATED=p.calibrated,
        )
    )
    params = inspect.signature(STORE._store_kernel.fn).parameters
    sig, cx, attrs = {}, {}, {}
    for i, (name, prm) in enumerate(params.items()):
        if name in consts or prm.default is not inspect.Parameter.empty:
            sig[name] = "constexpr"
            cx[(i,)] = consts.get(name, prm.default)
            continue
        if name in ("K", "V"):
            ty = "*bf16"
        elif name == "Cache":
            ty = "*u8"
        elif name in ("SlotMapping", "Positions"):
            ty = "*i64"
        elif name == "Hmat":
            ty = "*fp16"
        elif name[0].isupper():
            ty = "*fp32"
        elif name == "stride_blk":
            ty = "i64"
        else:
            ty = "i32"
        sig[name] = ty
        if ty.startswith("*") or name.startswith("stride"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=STORE._store_kernel, signature=sig, constexprs=cx, attrs=attrs)
    cap = getattr(cfg, "max_registers", 0)  # a tree from before the knob has no such field
    options = {"num_warps": cfg.num_warps} | ({"maxnreg": cap} if cap else {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def ptx_instructions(ptx: str) -> int:
    body = ptx[ptx.index("{", ptx.index(".entry")) :]
    n = 0
    for line in body.splitlines():
        s = line.strip()
        if s and not s.startswith(("//", ".", "{", "}", "$", "@$")) and not s.endswith(":"):
            n += 1
    return n


def sass(cubin: bytes) -> list[str] | None:
    """The SASS instructions (NOPs dropped), or None without the wheel's ``nvdisasm``."""
    if not (BIN / "nvdisasm").exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([BIN / "nvdisasm", "-c", f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    rows = [m.group(2).strip() for line in out.splitlines() if (m := SASS_LINE.match(line))]
    return [r for r in rows if not r.startswith("NOP")]


def registers(cubin: bytes) -> int | None:
    if not (BIN / "cuobjdump").exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([BIN / "cuobjdump", "--dump-resource-usage", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+)", out.stdout)
    return int(m.group(1)) if m else None


def count(preset: str, name: str, cfg: StoreConfig, with_sass: bool) -> dict:
    k = compile_store(preset, cfg)
    per_token = cfg.num_warps / cfg.block_t
    row = {"preset": preset, "config": name, "block_t": cfg.block_t, "num_warps": cfg.num_warps}
    row["ptx"] = ptx_instructions(k.asm["ptx"])
    row["ptx_per_token"] = round(row["ptx"] * per_token, 1)
    if with_sass and (rows := sass(k.asm["cubin"])) is not None:
        row["sass"] = len(rows)
        row["sass_per_token"] = round(len(rows) * per_token, 1)
        row["registers"] = registers(k.asm["cubin"])
        row["local_memory"] = sum(1 for r in rows if re.search(r"\b(LDL|STL)\b", r))
        row["ops"] = dict(collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", r).split()[0] for r in rows).most_common(8))
    return row


def default_sass(presets: list[str]) -> dict[str, list[str]]:
    return {p: sass(compile_store(p, TABLE).asm["cubin"]) or [] for p in presets}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="turboquant_k3v4_nc,turboquant_4bit_nc,tq_k4v3")
    ap.add_argument("--configs", help="comma list (default: table and every candidate of cands.py)")
    ap.add_argument("--sass", action="store_true", help="also SASS counts and registers (needs the wheel's nvdisasm)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--same-as", help="compare the default kernel's SASS with the tq_triton under this directory")
    ap.add_argument("--dump-default", help=argparse.SUPPRESS)
    args = ap.parse_args()
    presets = args.presets.split(",") if args.presets != "all" else list(EVERY_PRESET)
    if args.dump_default:
        Path(args.dump_default).write_text(json.dumps(default_sass(list(EVERY_PRESET))))
        return
    if args.same_as:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([args.same_as, os.environ.get("PYTHONPATH", "")]))
            out = Path(tmp) / "other.json"
            subprocess.run([sys.executable, __file__, "--dump-default", str(out)], env=env, check=True)
            other = json.loads(out.read_text())
        mine = default_sass(list(EVERY_PRESET))
        for p in EVERY_PRESET:
            same = mine[p] == other[p] and bool(mine[p])
            n_mine, n_other = len(mine[p]), len(other[p])
            print(f"{p:20} table configuration: {n_mine} vs {n_other} SASS instructions, identical: {same}")
        return
    cfgs = configs()
    rows = []
    args.configs = args.configs or ",".join(cfgs)
    for p in presets:
        for name in args.configs.split(","):
            if name not in cfgs:
                raise SystemExit(f"unknown configuration {name}: {', '.join(cfgs)}")
            cfg = cfgs[name]
            if cfg.rotation and tq_core.get_preset(p).key_is_fp8 and not tq_core.get_preset(p).calibrated:
                continue  # no rotation in this format
            rows.append(count(p, name, cfg, args.sass))
            r = rows[-1]
            extra = ""
            if "sass" in r:
                extra = f" sass {r['sass']:5d} ({r['sass_per_token']:6.1f}/token)"
                extra += f" regs {r['registers']} local {r['local_memory']}"
            print(f"{p:20} {name:14} ptx {r['ptx']:5d} ({r['ptx_per_token']:6.1f}/token){extra}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"triton": triton.__version__, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
