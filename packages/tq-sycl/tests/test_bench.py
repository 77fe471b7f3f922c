"""``python -m tq_sycl.bench`` where it cannot run (the timings themselves need an XPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tq_sycl import bench


def test_bench_says_what_is_missing(capsys):
    if bench.missing() is None:
        pytest.skip("an XPU and the stock build are present: run python -m tq_sycl.bench itself")
    assert bench.main(["--iters", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tq_sycl.bench: cannot run: ")
    assert "torch.xpu" in err or "stock build" in err


def test_no_other_backend_imported():
    # backends meet only through tq_core's registry (tq_core.contract), never by import
    src = Path(bench.__file__).parent
    found = [
        f"{path.relative_to(src)}:{n}"
        for path in sorted(src.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*(import|from)\s+tq_(?!core\b|sycl\b)\w", line)
    ]
    assert found == []
