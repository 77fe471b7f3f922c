"""python -m tq_core.codebooks: help, check by default, writes only where told."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest

from tq_core import codebooks

SHIPPED = resources.files("tq_core").joinpath("data")


def _data_state() -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of every file in tq_core's data folder."""
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in SHIPPED.iterdir() if p.is_file()}


def test_cli_codebooks_help_writes_nothing():
    before = _data_state()
    assert "codebooks.json" in before
    r = subprocess.run(
        [sys.executable, "-m", "tq_core.codebooks", "--help"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m tq_core.codebooks") and "--write PATH" in r.stdout
    assert "wrote" not in r.stdout + r.stderr
    assert _data_state() == before


def _shipped_table() -> dict:
    return json.loads(SHIPPED.joinpath("codebooks.json").read_text())


def test_cli_codebooks_checks_by_default(monkeypatch, capsys):
    before = _data_state()
    table = _shipped_table()
    monkeypatch.setattr(codebooks, "build_table", lambda: table)
    assert codebooks.main([]) == 0
    assert "matches the shipped one" in capsys.readouterr().out
    table["gaussian"]["3"]["centroids"][0] += 1e-3
    assert codebooks.main([]) == 1
    assert "DIFFERS" in capsys.readouterr().out
    assert codebooks.main(["--tolerance", "0.01"]) == 0
    assert _data_state() == before


def test_cli_codebooks_writes_only_the_given_path(monkeypatch, capsys, tmp_path):
    before = _data_state()
    table = {"units": "1/sqrt(d)", "gaussian": {}, "beta": {}}
    monkeypatch.setattr(codebooks, "build_table", lambda: table)
    path = tmp_path / "codebooks.json"
    assert codebooks.main(["--write", str(path)]) == 0
    assert json.loads(path.read_text()) == table
    assert capsys.readouterr().out == f"wrote {path}\n"
    assert codebooks.main(["--write", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == table
    assert _data_state() == before


def test_cli_codebooks_rejects_unknown_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        codebooks.main(["--nope"])
    assert exc.value.code == 2


def test_table_difference():
    a = {"gaussian": {"1": {"centroids": [-1.0, 1.0], "distortion": 0.5}}}
    b = json.loads(json.dumps(a))
    assert codebooks.table_difference(a, b) == 0
    b["gaussian"]["1"]["distortion"] = 0.25
    assert codebooks.table_difference(a, b) == 0.25
    b["gaussian"]["1"]["centroids"].append(2.0)
    assert codebooks.table_difference(a, b) == float("inf")
    assert codebooks.table_difference(a, {"beta": {}}) == float("inf")
