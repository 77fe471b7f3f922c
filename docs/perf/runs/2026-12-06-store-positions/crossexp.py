"""The portable kernel on the cross-kernel test's batch under Triton's interpreter.

    TRITON_INTERPRET=1 PYTHONPATH=packages/tq-core/src:packages/tq-triton/src \\
        python crossexp.py VARIANT PRESET SEED

VARIANT ``poly`` runs the plan as it is, ``table`` with ``plan.poly_keys`` patched to False
(3-bit keys from the register table: another summation order); for fp16 norm squares, edit
``key_poly.poly_keys``' last line to ``tl.sum((k16 * k16).to(tl.float32), axis=1)`` and run
``poly`` again under another name. Saves the output and tq-core's to /tmp/cx-VARIANT-PRESET-SEED.pt.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

sys.path.insert(0, "packages/tq-triton/tests")
os.environ.setdefault("TQ_BLOCK_KV", "32")


def main() -> None:
    from tqt_helpers import make_batch, run_triton

    plan = importlib.import_module("tq_triton.attention.plan")
    variant, preset, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if variant == "table":
        plan.poly_keys = lambda p, d: False
    gen = torch.Generator().manual_seed(seed)
    cpu = torch.device("cpu")
    b = make_batch(gen, preset, [1, 300, 2049, 77], [1, 8, 3, 8], head_dim=128, num_kv_heads=2, group=8, device=cpu)
    out, ref = run_triton(b, splits=1, max_query_len=8, out_dtype=torch.float32)
    torch.save({"out": out, "ref": ref}, f"/tmp/cx-{variant}-{preset}-{seed}.pt")
    print(variant, preset, seed, "to core", float((out - ref).abs().max() / ref.abs().max()))


if __name__ == "__main__":
    main()
