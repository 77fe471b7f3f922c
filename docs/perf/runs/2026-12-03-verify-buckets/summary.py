"""Prints each swept bucket's fastest configurations from `tq sweep` tables, against the
configuration that the shipped H200 table gives the same shape (verify-32k's geometry:
4 q heads per kv head, head_dim 128) and whether the sweep measured it."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from tq_triton import tuning
from tq_triton.attention import plan

SHOWN = ("gluon", "block_kv", "num_warps", "kv_splits", "waves", "max_registers")


def describe(m: dict) -> str:
    return " ".join(f"{k}={m[k]}" for k in SHOWN if k != "waves" or m["kv_splits"] == 0)


def main(paths: list[str]) -> None:
    for path in paths:
        table = json.loads(Path(path).read_text())
        by_bucket: dict[tuple[str, str], list[dict]] = {}
        for m in table["measurements"]:
            by_bucket.setdefault((m["preset"], m["bucket"]), []).append(m)
        for (preset, bucket), ms in by_bucket.items():
            q_len = int(bucket[1:])
            rows = plan.plan_block_q(4, q_len) * 4
            current = asdict(tuning.attention_config_for("NVIDIA H200", preset, q_len, rows, 128))
            ok = sorted((m for m in ms if "ms" in m), key=lambda m: m["ms"])
            errors = len(ms) - len(ok)
            cur = [m for m in ok if {k: m[k] for k in current} == current]
            cur_ms = cur[0]["ms"] if cur else float("nan")
            print(f"== {preset} {bucket}: {len(ok)} timed, {errors} failed; table now: {describe(current | {'ms': 0})}")
            print(f"   table now: {cur_ms:.4f} ms" + ("" if cur else " (not in the grid)"))
            for m in ok[:6]:
                print(f"   {m['ms']:.4f} ms  {cur_ms / m['ms']:.3f}x  {describe(m)}")
            best_portable = next((m for m in ok if not m["gluon"]), None)
            if best_portable and best_portable is not ok[0]:
                print(f"   best portable: {best_portable['ms']:.4f} ms  {describe(best_portable)}")


if __name__ == "__main__":
    main(sys.argv[1:])
