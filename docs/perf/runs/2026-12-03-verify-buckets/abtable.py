"""The A/B table of ab.txt (ab.sh's output): per shape and preset, both rounds of main
("base") and the working tree ("new"), new over base, and the speed-up over the fastest
bf16 kernel (the mean of the shape's four bf16 rows in the run)."""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict

PRESETS = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")
SHAPES = ("q_len 2", "q_len 3", "q_len 4", "decode-32k", "verify-32k")


def main(path: str) -> None:
    rows: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    section = None
    with open(path) as f:
        for line in f:
            m = re.match(r"== (.*) (base|new) r\d", line)
            if m or line.startswith("=="):
                section = (m.group(1), m.group(2)) if m else None
                continue
            cols = line.split()
            if section and len(cols) > 4 and (cols[2] == "tq_triton" or cols[1] == "bf16"):
                ms = next(float(c) for c in cols if re.fullmatch(r"\d+\.\d{4}", c))
                shape = section[0] if cols[0] == "custom" else cols[0]
                rows[(shape, cols[1], section[1])].append(ms)
    print("| shape | preset | main r1 / r2 | new r1 / r2 | new / main | fastest bf16 | x bf16 main | x bf16 new |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in SHAPES:
        bf16 = statistics.mean(rows[(shape, "bf16", "base")] + rows[(shape, "bf16", "new")])
        for p in PRESETS:
            b, n = rows[(shape, p, "base")], rows[(shape, p, "new")]
            mb, mn = statistics.mean(b), statistics.mean(n)
            print(
                f"| {shape} | {p.removeprefix('turboquant_')} | {b[0]:.4f} / {b[1]:.4f} | {n[0]:.4f} / {n[1]:.4f} "
                f"| {mn / mb:.3f} | {bf16:.4f} | {bf16 / mb:.2f} | {bf16 / mn:.2f} |"
            )


if __name__ == "__main__":
    main(sys.argv[1])
