# ruff: noqa: B023, E501
# A measurement script of this run, kept as it ran (lint fixes aside): see ../README.md.
"""store code_search A/B: 1 M tokens x 8 heads, 4 presets, interleaved, 3 rounds; bytes compared."""

import torch

from tq_core import get_preset
from tq_triton import bench
from tq_triton.store import store
from tq_triton.tuning import StoreConfig, store_config

dev = torch.device("cuda")
n, h, d = 1 << 20, 8, 128
k, v, slots = bench.store_inputs(n, h, d, dev)
bw = bench.copy_bandwidth_gbs(dev)
for name in ["turboquant_k3v4_nc", "turboquant_3bit_nc", "turboquant_4bit_nc", "turboquant_k8v4"]:
    p = get_preset(name)
    slot = p.layout(d).slot_size_aligned
    base = store_config(dev, name)
    caches, ts = {}, {0: [], 1: []}
    for cs in (0, 1):
        caches[cs] = torch.zeros(n // 16, 16, h, slot, dtype=torch.uint8, device=dev)
    for _rnd in range(3):
        for cs in (0, 1):
            cfg = StoreConfig(block_t=base.block_t, num_warps=base.num_warps, code_search=cs)
            ts[cs].append(bench.time_ms(lambda: store(k, v, caches[cs], slots, p, config=cfg), warmup=10, rep=60))
    same = torch.equal(caches[0], caches[1])
    nb = n * h * (2 * d * 2 + slot)
    a, b = sum(ts[0]) / 3, sum(ts[1]) / 3
    print(
        f"{name:20} cs0 {a:.4f} ms ({nb / a / 1e6 / bw * 100:.1f}% bw)  cs1 {b:.4f} ms ({nb / b / 1e6 / bw * 100:.1f}% bw)  B/A {b / a:.3f}  same_bytes {same}"
    )
