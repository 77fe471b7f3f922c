"""Split-KV counts: a per-device table with an environment override.

See docs/design.md#kernel-principles (principle 4: launch parameters come from tuning
tables, not from the launcher).

The numbers are starting points, not measurements: nothing here has run on Intel
hardware yet (docs/sycl.md). ``TQ_SYCL_NUM_SPLITS`` overrides the table for every call.
"""

from __future__ import annotations

import math
import os

from tq_core.errors import TuningError

# device-name substring -> (programs to aim for per launch, most splits)
TABLE: dict[str, tuple[int, int]] = {
    "Arc(TM) Pro B": (512, 32),  # Xe2 BMG, 32 Xe-cores
    "Arc(TM) B": (320, 32),  # Xe2 BMG, 20 Xe-cores
    "Data Center GPU Max": (1024, 32),  # PVC
    "": (256, 16),  # anything else
}


def env_num_splits() -> int | None:
    raw = os.environ.get("TQ_SYCL_NUM_SPLITS", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 256:
        raise TuningError(f"TQ_SYCL_NUM_SPLITS={raw!r}: expected an integer in 1..256")
    return int(raw)


def choose_num_splits(device_name: str, num_programs_per_split: int) -> int:
    """Splits so that (row tiles x kv heads x splits) fills the device; shapes only, no sync."""
    forced = env_num_splits()
    if forced is not None:
        return forced
    target, most = next(v for k, v in TABLE.items() if k in device_name)
    return max(1, min(most, math.ceil(target / max(1, num_programs_per_split))))
