"""``python -m tq_sycl.bench`` where it cannot run (the timings themselves need an XPU)."""

from __future__ import annotations

import pytest

from tq_sycl import bench


def test_bench_says_what_is_missing(capsys):
    if bench.missing() is None:
        pytest.skip("an XPU and the stock build are present: run python -m tq_sycl.bench itself")
    assert bench.main(["--iters", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tq_sycl.bench: cannot run: ")
    assert "torch.xpu" in err or "stock build" in err
