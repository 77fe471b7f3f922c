"""tq sweep / bench / profile without a GPU: argument errors first, then one line, exit 2.

torch.cuda and torch.xpu are patched to be unavailable, so GPU machines test the same path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from tq_core.cli import build_parser, main, subcommand_parsers
from tq_triton.cli import NO_GPU

GPU_COMMANDS = ("bench", "profile", "sweep")
MARKUP = re.compile(r"``|:[a-z]+:`")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if getattr(torch, "xpu", None) is not None:
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)


@pytest.mark.parametrize("cmd", GPU_COMMANDS)
def test_cli_help(cmd, capsys):
    parser = subcommand_parsers(build_parser())[cmd]
    for action in parser._actions:
        assert action.help and not MARKUP.search(action.help), action.option_strings
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: tq {cmd}") and "GPU" in out
    assert not MARKUP.search(out), MARKUP.search(out)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["bench", "--presets", "turboquant_k3v4_nc,turboquant_nope"], "unknown preset 'turboquant_nope'"),
        (["sweep", "--presets", "turboquant_nope"], "unknown preset 'turboquant_nope'"),
        (["profile", "--preset", "turboquant_nope"], "unknown preset 'turboquant_nope'"),
        (["bench", "--shapes", "decode-32k,decode-1m"], "unknown shape 'decode-1m'"),
        (["bench", "--batch", "0"], "argument --batch"),
        (["bench", "--seq-lens", "1024,x"], "argument --seq-lens"),
        (["bench", "--head-dim", "96"], "argument --head-dim"),
        (["bench", "--shapes", "custom", "--q-heads", "6", "--kv-heads", "4"], "multiple of --kv-heads"),
        (["bench", "--block-size", "1"], "block_size=1"),
        (["sweep", "--buckets", "q1,q3"], "unknown bucket 'q3'"),
        (["sweep", "--modes", "prefetch:1,eager:2"], "argument --modes"),
        (["sweep", "--wgmma", "0,2"], "argument --wgmma"),
        (["sweep", "--warps", "0"], "argument --warps"),
        (["sweep", "--seq-len", "-5"], "argument --seq-len"),
        (["sweep", "--head-dim", "96"], "argument --head-dim"),
        (["sweep", "--compile-jobs", "0"], "argument --compile-jobs"),
        (["sweep", "--buckets", "q1,q8:m64", "--head-dim", "256"], "--head-dim applies to the buckets without"),
        (["profile", "--shape", "decode-1m"], "argument --shape"),
        (["profile", "--iters", "0"], "argument --iters"),
    ],
)
def test_cli_argument_errors_come_before_the_device(argv, message, no_gpu, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    cap = capsys.readouterr()
    assert cap.err.startswith(f"usage: tq {argv[0]} "), cap.err
    assert f"tq {argv[0]}: error: " in cap.err and message in cap.err
    assert "GPU" not in cap.err


@pytest.mark.parametrize(
    "argv",
    [
        ["bench"],
        ["bench", "--shapes", "custom", "--q-lens", "1,4", "--presets", "all", "--seq-lens", "512,1024"],
        ["sweep"],
        ["sweep", "--presets", "turboquant_k8v4", "--modes", "pipeline:2", "--no-store"],
        ["sweep", "--buckets", "q2,q4,q16", "--gluon", "0,1", "--no-store"],
        ["profile"],
        ["profile", "--shape", "ragged", "--preset", "turboquant_3bit_nc", "--iters", "3"],
    ],
)
def test_cli_without_gpu_is_one_line_exit_2(argv, no_gpu, capsys, tmp_path):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.splitlines() == [f"tq {argv[0]}: {NO_GPU}"]
    assert "cuda or xpu GPU" in NO_GPU


def test_cli_without_gpu_process_has_no_traceback():
    """The real exit path (sys.exit(main())) in a fresh interpreter."""
    code = (
        "import sys, torch\n"
        "torch.cuda.is_available = lambda: False\n"
        "if getattr(torch, 'xpu', None) is not None: torch.xpu.is_available = lambda: False\n"
        "from tq_core.cli import main\n"
        "sys.exit(main(['bench', '--presets', 'turboquant_k8v4']))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [f"tq bench: {NO_GPU}"]


def _row(shape, preset, impl, ms, **extra):
    return {"shape": shape, "preset": preset, "impl": impl, "ms": ms, **extra}


def test_bench_gate_names_the_rows_below_its_bar():
    """`tq bench`'s gate line: held only when every tq row with a bf16 peer is at least the
    bar (default 1.3x) faster than it."""
    from tq_triton.cli.bench import GATE, _ratios, bf16_gate, gate_line

    assert GATE == 1.3
    rows = [
        _row("poc", "bf16", "packed-rows", 0.030),
        _row("poc", "turboquant_k3v4_nc", "tq_triton", 0.036),
        _row("poc", "turboquant_k8v4", "tq_triton", 0.0225),  # 1.33x
        _row("poc", "turboquant_k8v4", "looped-per-token", 0.150),
        _row("decode-32k", "bf16", "sdpa", 0.95),
        _row("decode-32k", "turboquant_k8v4", "tq_triton", 0.95 / 1.29),  # faster, not 1.3x faster
        _row("store-1024k-tok", "turboquant_k8v4", "tq_triton", 2.1),  # no bf16 peer: not counted
    ]
    _ratios(rows)
    gate = bf16_gate(rows)
    assert gate["rows"] == 3 and not gate["held"] and gate["factor"] == 1.3
    assert [(m["shape"], m["preset"]) for m in gate["slower"]] == [
        ("poc", "turboquant_k3v4_nc"),
        ("decode-32k", "turboquant_k8v4"),
    ]
    line = gate_line(gate)
    assert "at least 1.3x" in line
    assert line.endswith("missed by 2 of 3 rows: poc k3v4_nc 0.83x, decode-32k k8v4 1.29x")
    # a lower bar: only the row slower than bf16 misses
    assert [m["preset"] for m in bf16_gate(rows, 1.0)["slower"]] == ["turboquant_k3v4_nc"]
    faster = [r | {"ms": r["ms"] / 2} if r["impl"] == "tq_triton" else r for r in rows]
    for r in faster:
        r.pop("x_vs_bf16", None)
    _ratios(faster)
    assert bf16_gate(faster)["held"]
    assert gate_line(bf16_gate(faster)).endswith("held, 3 of 3 rows")
    assert "no tq row" in gate_line(bf16_gate([_row("poc", "bf16", "sdpa", 1.0)]))


def test_bench_both_lists_the_vendor_rows_below_the_bar():
    """`tq bench --kernel both`: a vendor-kernel row earns its place only at 1.1x the portable
    kernel's speed or more; portable rows are not judged."""
    from tq_triton.cli.bench import VENDOR_BAR, vendor_line, vendor_rows

    assert VENDOR_BAR == 1.1
    rows = [
        _row("poc", "bf16", "sdpa", 0.03),
        _row("poc", "turboquant_k8v4", "tq_triton", 0.02, kernel="gluon", x_vs_portable=1.25),
        _row("poc", "turboquant_k3v4_nc", "tq_triton", 0.02, kernel="token_rows", x_vs_portable=1.09),
        _row("poc", "tq_k6v5", "tq_triton", 0.03, kernel="portable", x_vs_portable=1.0),
        _row("decode-32k", "turboquant_4bit_nc", "tq_triton", 0.2, kernel="gluon-wgmma", x_vs_portable=0.8),
    ]
    v = vendor_rows(rows)
    assert [m["preset"] for m in v["earned"]] == ["turboquant_k8v4"]
    assert [(m["shape"], m["kernel"]) for m in v["below"]] == [("poc", "token_rows"), ("decode-32k", "gluon-wgmma")]
    line = vendor_line(v)
    assert line.startswith("vendor kernels at least 1.1x the portable kernel: 1 of 3 rows; below: ")
    assert line.endswith("poc k3v4_nc token_rows 1.09x, decode-32k 4bit_nc gluon-wgmma 0.80x")
    assert vendor_line(vendor_rows(rows[:1])).endswith("no row ran a vendor kernel")


def test_bench_targets_are_met_missed_or_not_run():
    """`tq bench`'s targets table: each target judged on its own row (a time ceiling for poc,
    floors elsewhere; the store's for every preset run), "not run" where the row is absent."""
    from tq_triton.cli.bench import TARGETS, targets

    rows = [
        _row("decode-32k", "turboquant_k3v4_nc", "tq_triton", 0.3, x_vs_bf16=3.1, pct_copy_bw=65.0),
        _row("decode-32k", "turboquant_k8v4", "tq_triton", 0.4, x_vs_bf16=2.3, pct_copy_bw=80.0),
        _row("poc", "turboquant_k8v4", "tq_triton", 0.0199),
        _row("poc", "turboquant_k3v4_nc", "tq_triton", 0.0201),
        _row("poc", "turboquant_k3v4_nc", "looped-per-token", 0.001),  # a baseline row is not tq's
        _row("store-1024k-tok", "turboquant_k8v4", "tq_triton.store", 2.0, pct_copy_bw=55.0),
        _row("store-1024k-tok", "tq_k4v4", "tq_triton.store", 9.0, pct_copy_bw=19.0),
    ]
    got = {(g["shape"], g["preset"], g["unit"]): (g["measured"], g["met"]) for g in targets(rows)}
    assert got[("decode-32k", "turboquant_k3v4_nc", "x bf16")] == (3.1, True)
    assert got[("decode-32k", "turboquant_k3v4_nc", "% copy bw")] == (65.0, False)
    assert got[("decode-32k", "turboquant_k8v4", "x bf16")] == (2.3, False)
    assert got[("verify-32k", "turboquant_k3v4_nc", "x bf16")] == (None, None)
    assert got[("poc", "turboquant_k8v4", "us")][1] is True
    assert got[("poc", "turboquant_k3v4_nc", "us")] == (pytest.approx(20.1), False)
    assert got[("store-1024k-tok", "turboquant_k8v4", "% copy bw")] == (55.0, True)
    assert got[("store-1024k-tok", "tq_k4v4", "% copy bw")] == (19.0, False)
    assert len(got) == len(TARGETS) - 1 + 2  # the store's target once per preset run


def test_bench_defaults_run_every_shape_and_format():
    """`tq bench` with no options times every named shape for every format."""
    from tq_core import CALIBRATED_PRESETS, PRESETS
    from tq_triton import bench

    args = build_parser().parse_args(["bench"])
    assert args.shapes == list(bench.SHAPES)
    assert args.presets == [*PRESETS, *CALIBRATED_PRESETS]
    assert {"verify-32k-q2", "verify-32k-q4", "verify-32k-q16", "decode-d64"} <= set(bench.SHAPES)
    assert bench.SHAPES["verify-32k-q16"].q_len == 16 and bench.SHAPES["decode-d64"].head_dim == 64
    # every head_dim and the longest q_len at the small one
    assert {(s.head_dim, s.q_len) for s in bench.SHAPES.values()} >= {(64, 1), (64, 16), (256, 1), (256, 4)}
    assert args.kernel == "default"


def test_bench_plot_draws_the_speedups_of_a_run(tmp_path):
    """`tq bench --plot` on grouped rows (no GPU needed for the drawing): a PNG with the
    speed-up and bandwidth panels."""
    pytest.importorskip("matplotlib")
    from tq_triton.cli.bench import _plot, _ratios

    rows = [
        _row("poc", "bf16", "packed-rows", 0.030, pct_copy_bw=52.0),
        _row("poc", "turboquant_k8v4", "tq_triton", 0.025, pct_copy_bw=24.0),
        _row("decode-d64", "bf16", "sdpa-cudnn", 0.064, pct_copy_bw=73.0),
        _row("decode-d64", "turboquant_k8v4", "tq_triton", 0.064, pct_copy_bw=28.0),
    ]
    for r in rows:
        r["seq_len"] = 8192
    _ratios(rows)
    out = tmp_path / "bench.png"
    _plot(rows, 4275.0, out, 1.3)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_json_keeps_the_cases_of_a_stopped_run(tmp_path, monkeypatch):
    """`tq bench --json` rewrites the file after every case, so a run stopped part-way (a time
    limit) keeps what it measured, marked incomplete; a finished run is marked complete. The
    device side is replaced by stand-ins (no GPU needed): the third timing interrupts."""
    import json
    import types

    from tq_triton import bench
    from tq_triton.cli import bench as cli_bench

    calls = []

    def fake_time(fn):
        calls.append(1)
        if stop_at and len(calls) == stop_at:
            raise KeyboardInterrupt
        return 0.5

    case = types.SimpleNamespace(bf16_bytes_read=10**6, cache_bytes_read=2 * 10**5, dense_k=None, dense_v=None)
    monkeypatch.setattr(cli_bench, "gpu_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(bench, "copy_bandwidth_gbs", lambda dev: 100.0)
    monkeypatch.setattr(bench, "build_case", lambda *a, **k: case)
    monkeypatch.setattr(bench, "sdpa_bf16", lambda c: ((lambda: None), "stand-in"))
    monkeypatch.setattr(bench, "time_ms", fake_time)
    monkeypatch.setattr(bench, "run_tq", lambda c, plan=None: None)
    monkeypatch.setattr(bench, "case_plan", lambda c, kernel: types.SimpleNamespace(token_rows=True))
    out = tmp_path / "bench.json"
    argv = ["bench", "--shapes", "decode-32k", "--presets", "turboquant_k8v4,turboquant_k3v4_nc", "--no-store"]
    argv += ["--json", str(out)]
    stop_at = 3  # bf16 and k8v4 timed, k3v4_nc's timing interrupted
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    doc = json.loads(out.read_text())
    assert doc["meta"]["complete"] is False
    assert [(r["preset"], r["impl"]) for r in doc["rows"]] == [("bf16", "stand-in"), ("turboquant_k8v4", "tq_triton")]
    calls.clear()
    stop_at = 0
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["meta"]["complete"] is True and len(doc["rows"]) == 3 and "gate" in doc
    assert doc["meta"]["kernel"] == "default" and doc["rows"][1]["kernel"] == "token_rows"


def test_sweep_store_grid_times_both_codebook_searches():
    """``tq sweep``'s store grid: every format on 16-64 token programs over 2-8 warps; those
    that search a codebook by binary search and by uniform bins, k8v4 (fp8 keys, uniform
    values) with no search."""
    from tq_triton.cli.sweep import store_grid

    for preset in ("turboquant_k3v4_nc", "tq_k4v3", "tq_k4v4", "tq_k6v5"):
        grid = store_grid(preset)
        assert {c.code_search for c in grid} == {1, 2}
        assert {(c.block_t, c.num_warps) for c in grid} == {(t, w) for t in (16, 32, 64) for w in (2, 4, 8)}
    assert {c.code_search for c in store_grid("turboquant_k8v4")} == {0}
