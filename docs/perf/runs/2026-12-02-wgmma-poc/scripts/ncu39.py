# ruff: noqa
"""One kernel a few times for Nsight Compute, with the H200 table's launch parameters.
argv: attn PRESET SHAPE | store PRESET"""

import sys
import torch
from tq_triton import bench
from tq_triton.store import store
from tq_core import get_preset

dev = torch.device("cuda")
if sys.argv[1] == "attn":
    case = bench.build_case(bench.SHAPES[sys.argv[3]], sys.argv[2], dev)
    for _ in range(4):
        bench.run_tq(case)
else:
    n, h, d = 1 << 20, 8, 128
    k, v, slots = bench.store_inputs(n, h, d, dev, seed=1)
    cache = torch.zeros(
        n // 16, 16, h, get_preset(sys.argv[2]).layout(d).slot_size_aligned, dtype=torch.uint8, device=dev
    )
    for _ in range(4):
        store(k, v, cache, slots, sys.argv[2])
torch.cuda.synchronize()
