"""One store launch per preset named, at tq bench's store shape (1 M tokens x 8 kv heads x
head_dim 128, bfloat16), with the H200 table's configuration: the launches for ncu to
profile (the first call of each preset compiles; the second is the one to profile).

    ncu --kernel-name regex:_store_kernel --launch-skip 1 --launch-count 1 \
        python3 store_once.py tq_k4v3
"""

from __future__ import annotations

import sys

import torch

from tq_core import get_preset
from tq_triton import bench
from tq_triton.cli.bench import STORE_TOKENS
from tq_triton.store import store


def main() -> None:
    dev = torch.device("cuda")
    n, h, d = STORE_TOKENS, 8, 128
    k, v, slots = bench.store_inputs(n, h, d, dev, seed=1)
    for preset in sys.argv[1].split(","):
        slot = get_preset(preset).layout(d).slot_size_aligned
        cache = torch.zeros(n // 16, 16, h, slot, dtype=torch.uint8, device=dev)
        extra = bench.store_extra(preset, n, h, d, dev)
        for _ in range(2):
            store(k, v, cache, slots, preset, **extra)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
