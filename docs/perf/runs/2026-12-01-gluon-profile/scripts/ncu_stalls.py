# ruff: noqa
"""Stall reasons of an Nsight Compute source-page CSV (argv: csv, top N): totals, then the N
instructions with the most samples."""

import csv, sys, collections

rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]
data = rows[2:]
ix = {h: i for i, h in enumerate(hdr)}
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = collections.Counter()


def num(x):
    try:
        return float(x)
    except:
        return 0.0


allsamp = sum(num(r[ix["Warp Stall Sampling (All Samples)"]]) for r in data)
for r in data:
    for h in reasons:
        tot[h] += num(r[ix[h]])
print("samples", allsamp)
for h, v in tot.most_common(10):
    print(f"  {h:28} {v / allsamp * 100:5.1f}%")
top = sorted(data, key=lambda r: -num(r[ix["Warp Stall Sampling (All Samples)"]]))[
    : int(sys.argv[2]) if len(sys.argv) > 2 else 30
]
for r in top:
    s = num(r[ix["Warp Stall Sampling (All Samples)"]])
    st = sorted(((num(r[ix[h]]), h[6:]) for h in reasons), reverse=True)[:3]
    print(
        f"{r[0]:>6} {s / allsamp * 100:5.1f}% {r[1][:60]:60} "
        + " ".join(f"{n}:{v / allsamp * 100:.1f}" for v, n in st if v)
    )
