"""clip/{legal,pydoc}.json -> markdown rows: KL ±se, ppl, value rel. err, paired KL ratio to the
shipped sym4 variant of the same components and to the 11-alpha search (sym4opt)."""
import json, math
from pathlib import Path
D = Path(__file__).parent

def mean_se(x):
    n = len(x); m = sum(x) / n
    return m, math.sqrt(sum((v - m) ** 2 for v in x) / (n - 1) / n)

for text in ("legal", "pydoc", "pydoc40", "pydoc40v"):
    p = D / f"{text}.json"
    if not p.exists():
        continue
    d = json.loads(p.read_text())
    by = {r["variant"]: r for r in d["results"]}
    print(f"\n### {text} ({d['windows']} windows, {d['seconds']:.0f} s)\n")
    print("| variant | KL ±se | ppl change ±se | value rel. err | KL ratio vs sym4 (paired) | KL ratio vs sym4opt (paired) | s |")
    print("|---|---|---|---|---|---|---|")
    for r in d["results"]:
        pre = "k=lm4g," if r["variant"].startswith("k=") else ""
        cells = []
        for ref in (pre + "v=sym4", pre + "v=sym4opt"):
            if ref == r["variant"] or ref not in by:
                cells.append("1" if ref == r["variant"] else "")
                continue
            m, se = mean_se([a / b for a, b in zip(r["window_kl"], by[ref]["window_kl"])])
            cells.append(f"{m:.3f} ±{se:.3f}")
        print(f"| {r['variant']} | {r['kl']:.4f} ±{r['kl_se']:.4f} | {100 * r['ppl_change']:+.2f}% ±{100 * r['ppl_change_se']:.2f} "
              f"| {r['value_rel_err']:.4f} | {cells[0]} | {cells[1]} | {r['seconds']:.0f} |")
