"""The H200 table entries that cands.py's measurements choose, written into a copy of a
tuning table: for each (format, bucket), the fastest candidate where it beats the table's
own choice by more than MARGIN. A Gluon winner at q16 becomes two entries, "q16" (mma.sync,
split_budget 4, every tile) and "q16:m64" (warpgroup products, 64-row tiles); a bucket the
table keys by head_dim 128 ("q2:d128") is replaced there.

    python3 pick.py TABLE.json CANDS.json [CANDS.json ...] > NEW.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MARGIN = 1.03
KEYS = (
    "block_kv",
    "num_warps",
    "num_stages",
    "kv_splits",
    "prefetch",
    "max_registers",
    "min_rows",
    "gluon",
    "wgmma",
    "split_budget",
    "skip_empty",
)


def pick(table: dict, results: list[dict]) -> list[str]:
    """Update ``table`` in place; return one line per entry changed."""
    att = table["attention"]
    changed = []
    for row in results:
        times, best = row["ms"], row["best"]
        if best == "table" or times["table"] / times[best] <= MARGIN:
            continue
        cfg = {k: row["configs"][best][k] for k in KEYS}
        if cfg["kv_splits"] == 0:
            cfg["waves"] = row["configs"][best]["waves"]
        sec = att.setdefault(row["preset"], {})
        bucket = row["bucket"]
        if bucket == "q16" and cfg["gluon"]:
            sec["q16"] = dict(cfg, wgmma=0, split_budget=4)
            sec["q16:m64"] = dict(cfg, wgmma=1, split_budget=0)
        elif ":" not in bucket and f"{bucket}:d128" in sec:
            sec[f"{bucket}:d128"] = cfg
        else:
            sec[bucket] = cfg
        changed.append(f"{row['preset']} {bucket}: {best} {times['table'] / times[best]:.2f}x the table's choice")
    return changed


def main() -> None:
    table = json.loads(Path(sys.argv[1]).read_text())
    results = [r for path in sys.argv[2:] for r in json.loads(Path(path).read_text())]
    for line in pick(table, results):
        print(line, file=sys.stderr)
    json.dump(table, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
