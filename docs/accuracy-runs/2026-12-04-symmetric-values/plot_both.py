"""The quality-against-bytes plot of both models: this run's SmolLM2 table (out/default.json)
and the byte model's of 2026-12-03 (its tq_k4v4 point has the Lloyd-Max values of then).
Run from the repository root: ``python3 docs/accuracy-runs/2026-12-04-symmetric-values/plot_both.py``."""

from __future__ import annotations

import json
from pathlib import Path

from tq_core.eval.report import plot

HERE = Path(__file__).parent
runs = [HERE / "out" / "default.json", HERE.parent / "2026-12-03-calibrated" / "byte-llama-triton" / "eval-triton.json"]
plot([json.loads(p.read_text()) for p in runs], HERE / "quality-vs-bytes.png")
