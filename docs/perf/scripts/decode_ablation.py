"""Which stage of the attention kernel costs the time: time it with a stage replaced by a constant.

Run on a GPU from the repository root (tq-core and tq-triton importable)::

    python3 docs/perf/scripts/decode_ablation.py --shape decode-32k

Each variant is a copy of the ``tq_triton/attention/`` package with text substitutions in
``tile.py``, loaded as a subpackage of ``tq_triton`` from a temporary directory (nothing is
written into the installed package). ``noK`` replaces the decoded key tile by a constant and ``noV`` the value tile;
the packed words are still loaded and folded into one integer per token, so the loads are
not optimised away. The outputs of the variants are wrong by design; only their times
mean something. Launch configuration: the device's table entry for the shape's bucket.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from tq_triton import bench
from tq_triton.tuning import attention_config

KEEP_K = "(tl.sum(ck0 ^ ck1 ^ ck2, axis=1) & 1).to(tl.float32)"
KEEP_V = "(tl.sum(cv0 ^ cv1 ^ cv2, axis=1) & 1).to(tl.float32)"
NO_K = [
    (
        "k16, cn2 = codebook_keys(ck0, ck1, ck2, Centroids, KBITS, BLOCK_KV, D)",
        f"cn2 = {KEEP_K} + 1.0\n        k16 = tl.full((BLOCK_KV, D), 0.01, tl.float16)",
    ),
    (
        "k16 = ck0.to(tl.float8e4nv, bitcast=True).to(tl.float16)\n        s = tl.dot(q16, tl.trans(k16))",
        "k16 = tl.full((BLOCK_KV, D), 0.01, tl.float16)\n        s = tl.dot(q16, tl.trans(k16))"
        " + (tl.sum(ck0.to(tl.int32), axis=1) & 1).to(tl.float32)[None, :]",
    ),
]
NO_V = [
    (
        "vc = unpack(cv0, cv1, cv2, VBITS, BLOCK_KV, D)\n"
        "    v16 = ((vc << (10 - VBITS)) | 0x3C00).to(tl.uint16).to(tl.float16, bitcast=True)",
        "v16 = tl.full((BLOCK_KV, D), 1.5, tl.float16)",
    ),
    (
        "zsum = tl.sum(p * cvz.to(tl.float32)[None, :], axis=1)",
        f"zsum = tl.sum(p * (cvz.to(tl.float32) + {KEEP_V})[None, :], axis=1)",
    ),
]
VARIANTS = {"base": [], "noK": NO_K, "noV": NO_V, "noKV": NO_K + NO_V}


def load_variant(tag: str, tmp: Path):
    # the package's directory (tq_triton.attention itself is the function it re-exports)
    src_dir = Path(importlib.import_module("tq_triton.attention.tile").__file__).parent
    pkg = tmp / f"_ablation_{tag}"
    shutil.copytree(src_dir, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    tile = pkg / "tile.py"
    src = tile.read_text()
    for old, new in VARIANTS[tag]:
        if old not in src:
            raise SystemExit(f"{tag}: attention/tile.py does not contain {old[:60]!r}; update this script")
        src = src.replace(old, new)
    tile.write_text(src)
    # a subpackage of tq_triton, so that its relative imports (..bitpack, ..tuning) resolve
    name = f"tq_triton._ablation_{tag}"
    spec = importlib.util.spec_from_file_location(name, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # Triton's JIT looks functions up through their module
    spec.loader.exec_module(mod)
    return mod


def time_variant(mod, case: bench.Case, cfg) -> float:
    return bench.time_ms(lambda: bench.run_tq(case, impl=mod.attention, config=cfg))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="decode-32k", choices=sorted(bench.SHAPES))
    ap.add_argument("--presets", default="turboquant_k3v4_nc,turboquant_k8v4")
    args = ap.parse_args()
    dev = torch.device("cuda")
    shape = bench.SHAPES[args.shape]
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            case = bench.build_case(shape, preset, dev)
            cfg = attention_config(dev, preset, case.max_query_len)
            print(f"== {shape.name} {preset}: {case.cache_bytes_read / 1e9:.3f} GB compressed; {cfg}")
            for tag in VARIANTS:
                ms = time_variant(load_variant(tag, Path(tmp)), case, cfg)
                print(f"  {tag:5} {ms:8.4f} ms  {case.cache_bytes_read / ms / 1e6:6.0f} GB/s", flush=True)
            del case
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
