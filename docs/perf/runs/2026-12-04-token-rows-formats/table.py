"""The markdown table of h200.md's current results: call 2's whole ``tq bench`` run (one run,
every shape and format beside the fastest bf16 kernel of each shape). Prints the table and
the gate's count. Usage: python3 table.py"""

from __future__ import annotations

import json
from pathlib import Path

FORMATS = [
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "tq_k4v3",
    "tq_k4v4",
    "tq_k6v5",
]
LABELS = {"packed-rows-flash": "flash, packed rows", "cudnn": "cuDNN", "flash-per-request": "flash per request"}
rows = json.loads((Path(__file__).parent / "logs" / "call2-bench.json").read_text())["rows"]
shapes = list(dict.fromkeys(r["shape"] for r in rows))
held = total = 0
print("| shape | fastest bf16, ms | " + " | ".join(f.removeprefix("turboquant_") for f in FORMATS) + " |")
print("|---" * (len(FORMATS) + 2) + "|")
for shape in shapes:
    here = [r for r in rows if r["shape"] == shape]
    bf16 = [r for r in here if r["preset"] == "bf16"]
    if not bf16:
        cells = [next((f"{r['pct_copy_bw']:.1f}%" for r in here if r["preset"] == f), "") for f in FORMATS]
        name = "store, 1 M tokens" if shape == "store-1024k-tok" else shape
        print(f"| {name}, % of copy bandwidth | | " + " | ".join(cells) + " |")
        continue
    b = min(bf16, key=lambda r: r["ms"])
    label = b["impl"].replace("sdpa-", "").replace("_attention", "").replace(" (lower bound)", "")
    cells = []
    for f in FORMATS:
        r = next(r for r in here if r["preset"] == f)
        x = b["ms"] / r["ms"]
        total += 1
        held += x >= 1.3
        text = f"{r['ms']:.4f} ({x:.2f}x)"
        cells.append(f"**{text}**" if x >= 1.3 else text)
    print(f"| {shape} | {b['ms']:.4f} ({LABELS.get(label, label)}) | " + " | ".join(cells) + " |")
print(f"\ngate: {held} of {total} rows at least 1.3x")
