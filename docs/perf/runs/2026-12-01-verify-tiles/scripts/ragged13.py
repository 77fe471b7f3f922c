# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""Every bf16 candidate of the ragged shape, timed the way tq bench times them."""

import torch

from tq_triton import bench

dev = torch.device("cuda")
case = bench.build_case(bench.SHAPES["ragged"], "turboquant_k8v4", dev, dense=True)
for label, fn, _rows in bench.bf16_candidates(case):
    try:
        fn()
        torch.cuda.synchronize()
        print(f"{label:40} {bench.time_ms(fn, warmup=5, rep=40):.4f} ms")
    except Exception as e:
        print(f"{label:40} refused: {str(e).splitlines()[0][:100]}")
