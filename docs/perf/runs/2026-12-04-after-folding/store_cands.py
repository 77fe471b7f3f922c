"""The store candidates of ../2026-12-04-store/cands.py, with register caps and smaller tiles
for the calibrated formats, whose folded norm raised the store's registers (96-111 to
138-165 per thread on sm_90, Triton 3.6) and so lowered the programs a multiprocessor holds.

    python3 docs/perf/runs/2026-12-04-after-folding/store_cands.py --presets tq_k4v3,... --json OUT

Same arguments and output as cands.py; only its candidate list is replaced.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-12-04-store"))
import cands

NEW = {
    "r96": {"max_registers": 96},
    "r112": {"max_registers": 112},
    "r128": {"max_registers": 128},
    "lean": {"lean": 1},
    "lean-r96": {"lean": 1, "max_registers": 96},
    "lean-r128": {"lean": 1, "max_registers": 128},
    "t8w2": {"block_t": 8, "num_warps": 2},
    "t32w4": {"block_t": 32, "num_warps": 4},
    "t32w8": {"block_t": 32, "num_warps": 8},
}

if __name__ == "__main__":
    cands.CANDIDATES.clear()
    cands.CANDIDATES.update(NEW)
    cands.main()
