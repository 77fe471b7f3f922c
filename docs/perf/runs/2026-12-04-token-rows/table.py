"""The markdown table of h200.md's current results: call 2's tq bench run (every shape), with
the rows of the shapes call 4 re-ran on the final tree (decode-32k, verify-32k-q2) taken
from call 4. Prints the table and the gate's count. Usage: python3 table.py"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent / "logs"
FORMATS = [
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "tq_k4v3",
    "tq_k4v4",
    "tq_k6v5",
]
full = json.loads((HERE / "call2-bench.json").read_text())
final = json.loads((HERE / "call4-bench.json").read_text())
redone = {r["shape"] for r in final["rows"]}
rows = [r for r in full["rows"] if r["shape"] not in redone] + final["rows"]
shapes = list(dict.fromkeys(r["shape"] for r in full["rows"]))
held = total = 0
print("| shape | fastest bf16, ms | " + " | ".join(f.removeprefix("turboquant_") for f in FORMATS) + " |")
print("|---" * (len(FORMATS) + 2) + "|")
for shape in shapes:
    here = [r for r in rows if r["shape"] == shape]
    bf16 = [r for r in here if r["preset"] == "bf16"]
    if not bf16:
        cells = []
        for f in FORMATS:
            r = next((r for r in here if r["preset"] == f), None)
            cells.append(f"{r['pct_copy_bw']:.1f}%" if r else "")
        print(f"| {shape}, % of copy bandwidth | | " + " | ".join(cells) + " |")
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
    src = " (call 4)" if shape in redone else ""
    print(f"| {shape}{src} | {b['ms']:.4f} ({label}) | " + " | ".join(cells) + " |")
print(f"\ngate: {held} of {total} rows at least 1.3x")
