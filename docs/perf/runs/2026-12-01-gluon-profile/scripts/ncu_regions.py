# ruff: noqa
"""Barriers, branches and exits of an Nsight Compute source-page CSV in address order, with
the cumulative share of stall samples (where the loop starts and ends)."""

import csv, sys

rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]
data = rows[2:]
ix = {h: i for i, h in enumerate(hdr)}


def num(x):
    try:
        return float(x)
    except:
        return 0.0


S = [num(r[ix["Warp Stall Sampling (All Samples)"]]) for r in data]
E = [num(r[ix["Instructions Executed"]]) for r in data]
tot = sum(S)
n = len(data)
# print branches (loop structure) with index
for i, r in enumerate(data):
    if "BRA" in r[1] or "BAR" in r[1] or "EXIT" in r[1]:
        print(i, r[1][:50], "exec", int(E[i]), f"cum_samples {sum(S[: i + 1]) / tot * 100:.1f}%")
