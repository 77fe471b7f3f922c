"""The markdown table of h200.md's current results: the last full tq bench run
(runs/2026-12-04-token-rows, call 2), with the rows of the shapes the token-rows kernel runs
(decode-32k, verify-32k at q_len 2 and 4) from this run's call 5, and 4bit_nc's decode-32k
cell from call 7 (its new table entry, timed by time_ct.py beside the fastest bf16 kernel
of that call; marked "c7"). Prints the table and the gate's count. Usage: python3 table.py"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent / "logs"
PREVIOUS = Path(__file__).parent.parent / "2026-12-04-token-rows" / "logs"
FORMATS = [
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "tq_k4v3",
    "tq_k4v4",
    "tq_k6v5",
]
full = json.loads((PREVIOUS / "call2-bench.json").read_text())
final = json.loads((HERE / "call5-bench.json").read_text())
redone = {r["shape"] for r in final["rows"]}
rows = [r for r in full["rows"] if r["shape"] not in redone] + final["rows"]
# call 7: decode-32k, 4bit_nc on 16-token tiles and 64 waves (the new q1 entry)
c7 = json.loads((HERE / "call7-time_ct.json").read_text())
c7_ms = next(
    r["ms"] for r in c7 if r["preset"] == "turboquant_4bit_nc" and r["cfg"] == dict(block_kv=16, kv_splits=0, waves=64)
)
c7_bf16 = next(r["bf16"] for r in c7 if r["preset"] == "turboquant_4bit_nc")
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
        name = "store, 1 M tokens" if shape == "store-1024k-tok" else shape
        print(f"| {name}, % of copy bandwidth | | " + " | ".join(cells) + " |")
        continue
    b = min(bf16, key=lambda r: r["ms"])
    label = b["impl"].replace("sdpa-", "").replace("_attention", "").replace(" (lower bound)", "")
    label = {"packed-rows-flash": "flash, packed rows", "cudnn": "cuDNN", "flash-per-request": "flash per request"}.get(
        label, label
    )
    cells = []
    for f in FORMATS:
        r = next(r for r in here if r["preset"] == f)
        ms, x, mark = r["ms"], b["ms"] / r["ms"], ""
        if shape == "decode-32k" and f == "turboquant_4bit_nc":
            ms, x, mark = c7_ms, c7_bf16 / c7_ms, ", c7"
        total += 1
        held += x >= 1.3
        text = f"{ms:.4f} ({x:.2f}x{mark})"
        cells.append(f"**{text}**" if x >= 1.3 else text)
    src = " (call 5)" if shape in redone else ""
    print(f"| {shape}{src} | {b['ms']:.4f} ({label}) | " + " | ".join(cells) + " |")
print(f"\ngate: {held} of {total} rows at least 1.3x")
