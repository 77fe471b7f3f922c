"""Store configurations of the calibrated formats (and k3v4_nc), timed on the GPU in one process.

python store_sweep.py compile PRESET   # compiles every configuration (run one per preset, in parallel)
python store_sweep.py time OUT.json    # times them all, the shipped table's entry first
"""
import itertools
import json
import sys
from dataclasses import replace

import torch

from tq_core import get_preset
from tq_triton import bench
from tq_triton.store import store
from tq_triton.tuning import StoreConfig, store_config

PRESETS = ["tq_k4v3", "tq_k4v4", "tq_k6v5", "turboquant_k3v4_nc"]
GRID = [(bt, w, r) for bt, w, r in itertools.product((16, 32, 64), (4, 8), (0, 96, 128)) if not (bt == 16 and w == 8)]


def setup(preset, n):
    h, d = 8, 128
    k, v, slots = bench.store_inputs(n, h, d, torch.device("cuda"), seed=1)
    slot = get_preset(preset).layout(d).slot_size_aligned
    cache = torch.zeros(n // 16, 16, h, slot, dtype=torch.uint8, device="cuda")
    extra = bench.store_extra(preset, n, h, d, torch.device("cuda"))
    return k, v, slots, cache, extra, n * h * (2 * d * 2 + slot)


def main():
    if sys.argv[1] == "compile":
        preset = sys.argv[2]
        k, v, slots, cache, extra, _ = setup(preset, 1 << 12)
        for bt, w, r in GRID:
            store(k, v, cache, slots, preset, config=StoreConfig(block_t=bt, num_warps=w, code_search=1, max_registers=r), **extra)
        torch.cuda.synchronize()
        return
    dev = torch.device("cuda")
    bw = bench.copy_bandwidth_gbs(dev)
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    rows = []
    for preset in PRESETS:
        k, v, slots, cache, extra, nbytes = setup(preset, 1 << 20)
        table = store_config(dev, preset)
        cfgs = [("table", table)] + [(f"{bt}/{w}/{r}", StoreConfig(block_t=bt, num_warps=w, code_search=1, max_registers=r)) for bt, w, r in GRID]
        for name, cfg in cfgs:
            t = bench.time_ms(lambda cfg=cfg: store(k, v, cache, slots, preset, config=cfg, **extra), warmup=5, rep=30)
            pct = 100 * nbytes / (t * 1e-3) / 1e9 / bw
            rows.append({"preset": preset, "config": name, "block_t": cfg.block_t, "num_warps": cfg.num_warps,
                         "max_registers": cfg.max_registers, "ms": t, "pct_copy_bw": pct})
            print(f"{preset:20} {name:10} {t:8.4f} ms {pct:5.1f}%", flush=True)
        del k, v, slots, cache
    json.dump({"copy_bw_gbs": bw, "rows": rows}, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()
