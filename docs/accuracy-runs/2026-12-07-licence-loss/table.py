"""Collect out/*.json of kvq.py eval into one markdown table (out/table.md).

Per row: variant, text, ppl change ±se, KL ±se, top-1 agreement, key / value relative error
(model space, first batch), seconds; and where a reference variant ran in the same file
(same windows), the mean over windows of the per-window KL ratio to it (paired, ± se).
"""

import json
import math
import sys
from pathlib import Path

OUT = Path(__file__).with_name("out")
FILES = sys.argv[1:] or [
    "attr-legal", "attr-pydoc", "cand-legal", "best-legal", "cand-pydoc", "layers-legal", "tcq-legal", "tcq-pydoc",
    "tcqf-legal", "tcqf-pydoc",
]
# reference of a variant: the shipped coder of each coded component (same components coded)
SHIP = {"k": "lm4g"}


def ref_of(name):
    parts = dict(p.split("=", 1) for p in name.split(","))
    parts = {k: (v.split(":", 1)[1] if v.startswith("err") else v) for k, v in parts.items()}
    ref = {}
    if "k" in parts:
        ref["k"] = "lm4g"
    if "v" in parts:
        v = parts["v"]
        ref["v"] = "sym4" if v in ("sym4", "sym4opt", "lm4g", "lm4opt") or v.startswith("tcq4") else "lm3g"
    for extra in ("p0", "layers"):
        if extra in parts:
            ref[extra] = parts[extra]
    return ",".join(f"{k}={v}" for k, v in ref.items())


def mean_se(x):
    n = len(x)
    m = sum(x) / n
    if n < 2:
        return m, float("nan")
    return m, math.sqrt(sum((v - m) ** 2 for v in x) / (n - 1) / n)


NLL = {}  # (text, variant) -> window_nll
POOL = {}  # (text, variant) -> window_kl, from any file (same windows, deterministic baseline)
for f in FILES:
    p = OUT / f"{f}.json"
    if p.exists():
        d = json.loads(p.read_text())
        text = "legal" if "legal" in d["text"] else "pydoc"
        for r in d["results"]:
            if "window_kl" in r:
                POOL.setdefault((text, r["variant"]), r["window_kl"])
                NLL.setdefault((text, r["variant"]), r["window_nll"])
rows = []
for f in FILES:
    p = OUT / f"{f}.json"
    if not p.exists():
        continue
    d = json.loads(p.read_text())
    text = "legal" if "legal" in d["text"] else "pydoc"
    by = {r["variant"]: r for r in d["results"]}
    for r in d["results"]:
        ratio = ""
        ref = ref_of(r["variant"])
        if ref != r["variant"] and (text, ref) in POOL and "window_kl" in r:
            m, se = mean_se([a / b for a, b in zip(r["window_kl"], POOL[(text, ref)])])
            ratio = f"{m:.3f} ±{se:.3f} (vs {ref})"
            dm, dse = mean_se([a - b for a, b in zip(r["window_nll"], NLL[(text, ref)])])
            ratio += f"; ppl {100 * math.expm1(dm):+.2f}% ±{100 * dse:.2f} vs it"
        rows.append(
            f"| {r['variant']} | {text} | {100 * r['ppl_change']:+.2f}% ±{100 * (r['ppl_change_se'] or 0):.2f} "
            f"| {r['kl']:.4f} ±{r['kl_se'] or 0:.4f} | {r['top1']:.4f} | {r['key_rel_err']:.4f} / {r['value_rel_err']:.4f} "
            f"| {ratio} | {f} | {r['seconds']:.0f} |"
        )
hdr = (
    "| variant | text | ppl change ±se | KL ±se | top-1 | key / value rel. err | KL ratio, paired | file | s |\n"
    "|---|---|---|---|---|---|---|---|---|"
)
(OUT / "table.md").write_text(hdr + "\n" + "\n".join(rows) + "\n")
print(hdr)
print("\n".join(rows))
