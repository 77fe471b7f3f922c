"""The tq command (info, capacity, demo) and the synthetic K/V generator."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
from tqc_helpers import FakeEntryPoint

import tq_core
from tq_core.cli import build_parser, main, subcommand_parsers
from tq_core.cli.capacity import MODELS, ModelShape, boundary_layer_set, capacity_rows
from tq_core.cli.demo import make_batch, pick_device
from tq_core.synthetic import SyntheticKV, synthetic_kv


def test_all_commands_registered():
    parser = build_parser()
    assert parser.epilog is None, parser.epilog  # no broken entry point
    help_text = parser.format_help()
    for cmd in ("info", "capacity", "demo"):
        assert cmd in help_text


COMMANDS = sorted(subcommand_parsers(build_parser()))  # tq-core's and those of installed tq packages
MARKUP = re.compile(r"``|:[a-z]+:`")  # reST literals and roles (:class:`x`, :func:`y`)


@pytest.mark.parametrize("cmd", [None, *COMMANDS])
def test_cli_help_is_plain_text(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"] if cmd is None else [cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: tq {cmd or ''}".rstrip())
    assert not MARKUP.search(out), MARKUP.search(out)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_cli_every_option_has_help(cmd):
    parser = subcommand_parsers(build_parser())[cmd]
    assert parser.description
    for action in parser._actions:
        assert action.help and not MARKUP.search(action.help), (cmd, action.option_strings)


def no_gpu(monkeypatch) -> None:
    """Make torch see neither cuda nor xpu, so that GPU machines test the CPU-only path too."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if getattr(torch, "xpu", None) is not None:
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)


def usage_error(capsys, argv: list[str]) -> str:
    """argparse's answer to a bad argument: exit 2, the subcommand's usage, then the problem."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: tq {argv[0]} ") and f"tq {argv[0]}: error: " in err, err
    return err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["demo", "--head-dim", "96"], "--head-dim"),
        (["demo", "--presets", "turboquant_nope"], "turboquant_nope"),
        (["demo", "--kv-heads", "0"], "--kv-heads"),
        (["demo", "--seq-len", "8"], "--seq-len"),
        (["demo", "--q-heads", "6", "--kv-heads", "4"], "multiple of --kv-heads"),
        (["demo", "--block-size", "1"], "--block-size 1"),
        (["capacity", "--memory-gib", "0"], "--memory-gib"),
        (["capacity", "--layers", "0"], "--layers"),
        (["capacity", "--boundary-layers", "-1"], "--boundary-layers"),
        (["capacity", "--head-dim", "96"], "--head-dim"),
    ],
)
def test_cli_argument_errors_come_before_the_device(argv, message, capsys, monkeypatch):
    no_gpu(monkeypatch)
    err = usage_error(capsys, [*argv, "--device", "cuda"] if argv[0] == "demo" else argv)
    assert message in err and "torch sees no" not in err


@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_cli_missing_device_is_one_line_exit_2(device, capsys, monkeypatch):
    no_gpu(monkeypatch)
    assert main(["demo", "--device", device]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.splitlines() == [
        f"tq demo: --device {device}: torch sees no {device.upper()} device; --device cpu runs on the CPU"
    ]


def test_version_via_python_m():
    r = subprocess.run(
        [sys.executable, "-m", "tq_core.cli", "--version"], capture_output=True, text=True, timeout=120, check=True
    )
    assert r.stdout.strip() == f"tq-core {tq_core.__version__}"


# ---------------------------------------------------------------- info


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for dist in ("tq-core", "tq-triton", "tq-sycl", "tq-vllm"):
        (line,) = [ln for ln in lines if ln.split()[:1] == [dist]]
        assert line.split(None, 1)[1].strip() == _installed(dist)
    assert "torch:" in out and torch.__version__ in out
    assert any(ln.split()[:1] == ["cpu"] for ln in lines)
    cuda_line = [ln for ln in lines if ln.split()[:1] == ["cuda"]]
    assert cuda_line and ("none" in cuda_line[0] if not torch.cuda.is_available() else "cuda:0" in cuda_line[0])
    assert "xpu" in out and "triton:" in out


def test_info_prints_plugin_sections_and_survives_errors(capsys, monkeypatch, entry_points):
    """Each ``tq.info`` entry point adds a section (its dict); one that raises reports, never crashes."""

    def broken() -> dict[str, str]:
        raise RuntimeError("no icpx on PATH")

    toolchain = {"compiler": "icpx 2025.3", "target": "bmg"}
    entry_points(
        "tq.info",
        [
            FakeEntryPoint("sycl toolchain", "tq_fake.toolchain:describe", lambda: toolchain),
            FakeEntryPoint("sycl runtime", "tq_fake.runtime:describe", broken),
        ],
    )
    assert main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("sycl toolchain:")
    assert [ln.split() for ln in lines[at + 1 : at + 3]] == [["compiler", "icpx", "2025.3"], ["target", "bmg"]]
    assert "sycl runtime:    unavailable (RuntimeError: no icpx on PATH)" in lines

    monkeypatch.setattr(torch.cuda, "is_available", lambda: (_ for _ in ()).throw(RuntimeError("driver")))
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "unavailable (RuntimeError: driver)" in out and "icpx 2025.3" in out


def test_info_lists_installed_backends(capsys, entry_points):
    def missing():
        raise ModuleNotFoundError("No module named 'triton'")

    entry_points("tq.backends", [FakeEntryPoint("triton", "tq_fake.backend:backend", missing)])
    assert main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("backends:")
    core, triton = (ln.split(None, 1) for ln in lines[at + 1 : at + 3])
    assert core == ["core", "tq_core (torch reference); runs on cpu, cuda, xpu"]
    assert triton[0] == "triton" and "unavailable" in triton[1] and "No module named 'triton'" in triton[1]


# ---------------------------------------------------------------- capacity


def _table(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and (parts[0].startswith("turboquant_") or parts[0] in ("bf16", "fp8")):
            rows[parts[0]] = parts[1:]
    return rows


def test_capacity_without_boundary_layers_is_the_byte_ratio(capsys, tmp_path):
    path = tmp_path / "cap.json"
    argv = ["capacity", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--memory-gib", "10"]
    assert main([*argv, "--boundary-layers", "0", "--json", str(path)]) == 0
    rows = _table(capsys.readouterr().out)
    # 512 bytes of bf16 K+V per token and head vs the slot size
    assert rows["bf16"][-2:] == ["1.00x", "0.50x"]
    assert rows["fp8"][-2:] == ["2.00x", "1.00x"]
    assert rows["turboquant_k8v4"][2] == "2.61x"  # 512 / 196
    assert rows["turboquant_4bit_nc"][2] == "3.82x"  # 512 / 134
    assert rows["turboquant_k3v4_nc"][2] == "4.34x"  # 512 / 118
    assert rows["turboquant_3bit_nc"][2] == "5.02x"  # 512 / 102
    doc = json.loads(path.read_text())
    by_name = {r["name"]: r for r in doc["rows"]}
    mem = 10 * 2**30
    for name, slot in [("turboquant_k8v4", 196), ("turboquant_4bit_nc", 134), ("turboquant_k3v4_nc", 118)]:
        r = by_name[name]
        assert r["bytes_per_token"] == slot * 8 * 32
        assert r["tokens"] == mem // (slot * 8 * 32)
        assert r["ratio_vs_bf16"] == pytest.approx(512 / slot, rel=1e-12)
        assert r["ratio_vs_fp8"] == pytest.approx(256 / slot, rel=1e-12)
    assert by_name["bf16"]["tokens"] == mem // (4 * 128 * 8 * 32)


def test_capacity_boundary_layers_cost_bf16(capsys):
    assert main(["capacity", "--model", "llama-3.1-8b", "--memory-gib", "16"]) == 0
    out = capsys.readouterr().out
    assert "32 layers, 8 kv heads, head_dim 128" in out and "4 of 32" in out
    rows = _table(out)
    k3v4 = 118 * 8 * 28 + 4 * 128 * 8 * 4  # 28 TurboQuant layers + 4 bf16 boundary layers
    assert rows["turboquant_k3v4_nc"][0] == f"{k3v4:,}"
    assert rows["turboquant_k3v4_nc"][1] == f"{16 * 2**30 // k3v4:,}"
    assert rows["turboquant_k3v4_nc"][2] == f"{4 * 128 * 8 * 32 / k3v4:.2f}x"


def test_boundary_layer_set():
    assert boundary_layer_set(32, 2) == {0, 1, 30, 31}
    assert boundary_layer_set(5, 2) == {0, 1, 3, 4}  # a 5-layer model keeps one TurboQuant layer
    assert boundary_layer_set(3, 2) == {0, 2}  # capped at layers // 2 per side
    assert boundary_layer_set(1, 2) == set()
    assert boundary_layer_set(32, 0) == set()
    rows = capacity_rows(ModelShape(4, 2, 64), 2**20, boundary_layers=2)
    assert len({r.bytes_per_token for r in rows if r.name != "fp8"}) == 1  # every layer kept in bf16


def test_model_shapes():
    assert MODELS["llama-3.1-8b"] == ModelShape(32, 8, 128)
    assert MODELS["llama-3.1-70b"] == ModelShape(80, 8, 128)
    assert MODELS["qwen3-8b"] == ModelShape(36, 8, 128)
    assert MODELS["qwen3-30b-a3b"] == ModelShape(48, 4, 128)


def test_capacity_rejects_bad_head_dim(capsys):
    err = usage_error(capsys, ["capacity", "--head-dim", "96"])
    assert "argument --head-dim: invalid choice: 96" in err


# ---------------------------------------------------------------- demo


def test_demo_small_run(capsys, tmp_path):
    path = tmp_path / "demo.json"
    argv = ["demo", "--device", "cpu", "--seq-len", "160", "--batch", "3", "--kv-heads", "2", "--q-heads", "8"]
    assert main([*argv, "--head-dim", "64", "--block-size", "16", "--seed", "3", "--json", str(path)]) == 0
    cap = capsys.readouterr()
    total = len(tq_core.PRESETS) + len(tq_core.CALIBRATED_PRESETS)
    assert f"[4/{total}] turboquant_3bit_nc" in cap.err and "done in" in cap.err  # progress on stderr
    out = cap.out
    assert "implementation: tq_core (torch reference)" in out and "device cpu" in out
    cited = re.findall(r"[\w./-]+\.md", out)  # every document the output cites is in the repository
    assert "docs/references.md" in cited and all(c.startswith("docs/") for c in cited), cited
    repo = Path(__file__).resolve().parents[3]
    if (repo / "docs").is_dir():  # a checkout (an sdist has no docs/)
        assert all((repo / c).is_file() for c in cited), cited
    for col in ("bytes/tok/head", "vs bf16", "key MSE", "theory", "value err", "attn rel L2", "attn cos mean"):
        assert col in out
    doc = json.loads(path.read_text())
    rows = {r["format"]: r for r in doc["rows"]}
    assert list(rows) == ["bf16", "fp8", *tq_core.PRESETS, *tq_core.CALIBRATED_PRESETS]
    for name, p in tq_core.PRESETS.items():
        r = rows[name]
        slot = p.layout(64).slot_size_aligned
        assert r["bytes_per_token"] == slot and r["ratio_vs_bf16"] == pytest.approx(256 / slot)
        assert f"{name:<18}  {slot:>14}  {256 / slot:>6.2f}x" in out  # aligned columns
        assert 0 < r["attn_rel_l2"] < 0.6 and 0.8 < r["attn_cos_mean"] <= 1.0
        if not p.key_is_fp8:
            assert r["key_mse_theory"] == tq_core.distortion(p.key_bits)
            assert 0.5 * r["key_mse_theory"] < r["key_mse"] < 1.5 * r["key_mse_theory"]
    assert rows["turboquant_3bit_nc"]["value_rel_err"] > rows["turboquant_k3v4_nc"]["value_rel_err"]
    assert rows["turboquant_4bit_nc"]["key_mse"] < rows["turboquant_k3v4_nc"]["key_mse"]
    assert rows["bf16"]["attn_rel_l2"] == 0
    assert doc["config"]["q_lens"][:2] == [1, 4]  # decode and verify requests
    # calibrated on other draws of the layer, whose keys share large per-head offsets
    assert rows["tq_k4v3"]["bytes_per_token"] == 60 and rows["tq_k4v3"]["key_mse_theory"] is None
    assert rows["tq_k4v3"]["attn_rel_l2"] < 0.7 * rows["turboquant_k3v4_nc"]["attn_rel_l2"]
    assert rows["tq_k4v4"]["attn_rel_l2"] < 0.8 * rows["turboquant_4bit_nc"]["attn_rel_l2"]


@pytest.mark.parametrize(("seq_len", "batch", "bs"), [(2048, 4, 16), (9, 1, 8), (300, 6, 32)])
def test_demo_batch_is_ragged_decode_and_verify_over_shuffled_blocks(gen, seq_len, batch, bs):
    b = make_batch(seq_len, batch, bs, gen)
    assert len(b.seq_lens) == batch and b.seq_lens[0] == seq_len
    assert all(9 <= s <= seq_len for s in b.seq_lens)
    assert batch == 1 or len(set(b.seq_lens)) > 1  # ragged
    assert b.q_lens == [(1, 4, 1, 8)[i % 4] for i in range(batch)]
    nblocks = [math.ceil(s / bs) for s in b.seq_lens]
    assert b.num_blocks == sum(nblocks) + 3
    used = [int(x) for r, n in enumerate(nblocks) for x in b.block_table[r, :n]]
    assert sorted(used) == sorted(set(used)) and all(0 <= x < b.num_blocks for x in used)
    assert bool(((b.block_table >= 0) & (b.block_table < b.num_blocks)).all())  # padding names real blocks
    expected = [int(b.block_table[r, p // bs]) * bs + p % bs for r, s in enumerate(b.seq_lens) for p in range(s)]
    assert b.slot_mapping.tolist() == expected


def test_demo_quiet_and_preset_subset(capsys):
    argv = ["demo", "-q", "--seq-len", "40", "--batch", "2", "--kv-heads", "1", "--q-heads", "2", "--head-dim", "64"]
    assert main([*argv, "--presets", "turboquant_k3v4_nc"]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    assert "turboquant_k3v4_nc" in cap.out and "turboquant_k8v4" not in cap.out


def test_pick_device():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if expected == "cpu" and getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
        expected = "xpu"
    assert pick_device("auto").type == expected
    assert pick_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(tq_core.BackendUnavailableError, match="cuda"):
            pick_device("cuda")


# ---------------------------------------------------------------- synthetic data


def test_synthetic_is_seeded():
    a, b = synthetic_kv(50, 2, 64, seed=7), synthetic_kv(50, 2, 64, seed=7)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    c = synthetic_kv(50, 2, 64, seed=8)
    assert not torch.equal(a[0], c[0])
    s1, s2 = SyntheticKV(2, 64, seed=1), SyntheticKV(2, 64, seed=1)
    s1.kv(10), s2.kv(10)
    assert torch.equal(s1.query(5, 4), s2.query(5, 4))


def test_synthetic_has_outlier_channels_and_head_offsets():
    gen = SyntheticKV(4, 128, seed=0, outlier_channels=4)
    k, v = gen.kv(4096)
    assert k.shape == v.shape == (4096, 4, 128) and k.dtype == torch.float32
    rms = k.pow(2).mean(0).sqrt()  # [H, d]
    top = rms.topk(4, dim=-1).values.mean(-1)
    median = rms.median(dim=-1).values
    assert bool((top > 5 * median).all())  # a few high-magnitude channels per head
    mean = k.mean(0)
    assert float((mean[0] - mean[1]).norm()) > 5  # heads have their own offsets
    assert 0.3 < float(v.std()) < 2.0


def test_synthetic_query_logit_spread():
    gen = SyntheticKV(2, 128, seed=0, logit_spread=2.0)
    k, _ = gen.kv(4096)
    q = gen.query(64, 8)
    logits = torch.einsum("qhd,thd->qht", q, k.repeat_interleave(4, 1)) / math.sqrt(128)
    spread = float(logits.std(dim=-1).mean())
    assert 1.4 < spread < 2.8
    with pytest.raises(ValueError, match="num_q_heads"):
        gen.query(1, 3)


def test_synthetic_device_and_dtype():
    k, v = synthetic_kv(3, 1, 64, device="cpu", dtype=torch.bfloat16)
    assert k.dtype == v.dtype == torch.bfloat16


def test_plugin_that_cannot_load_fails_with_one_line(monkeypatch, capsys):
    """An installed plugin whose import fails here (tq-triton without Triton) keeps its
    command name: any arguments, one line on stderr naming the reason, exit status 2."""
    import tq_core.cli as cli

    class BrokenEntryPoint:
        name, value = "bench", "tq_fake.cli:register"

        def load(self):
            raise ModuleNotFoundError("tq_fake needs Triton")

    monkeypatch.setattr(cli, "entry_points", lambda group: [BrokenEntryPoint()])
    assert cli.main(["bench", "--presets", "x", "--shapes", "poc"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tq bench: unavailable here: ModuleNotFoundError: tq_fake needs Triton"]
    with pytest.raises(SystemExit) as exc:  # commands that did load still refuse unknown options
        cli.main(["capacity", "--bogus"])
    assert exc.value.code == 2


def test_write_json_and_utc_timestamp(tmp_path):
    from tq_core.cli.output import utc_timestamp, write_json

    path = tmp_path / "out.json"
    write_json(path, {"a": [1, 2]})
    assert path.read_text() == '{\n "a": [\n  1,\n  2\n ]\n}\n'
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", utc_timestamp())
    # a write that fails half-way leaves the previous file whole, and no temporary file
    with pytest.raises(TypeError):
        write_json(path, {"a": [1, 2], "b": object()})
    assert path.read_text() == '{\n "a": [\n  1,\n  2\n ]\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_table_lines_pad_align_and_rule():
    from tq_core.cli.table import table_lines

    lines = table_lines(("name", "n"), [("a", "1000"), ("bbbbbb", "2")], "<>")
    assert lines == ["name       n", "------  ----", "a       1000", "bbbbbb     2"]
    assert table_lines(("x", "y"), [("1", "2")], "><") == ["x  y", "-  -", "1  2"]
