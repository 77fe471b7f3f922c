"""The evaluation loop: one uncompressed pass per batch of windows, then one pass per
format, each scored against it."""

from __future__ import annotations

import datetime
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..__about__ import __version__
from ..calibration import NO_CALIBRATION, Calibration, amortised_bytes, state_bytes_per_layer
from ..contract import core_backend, select_backend
from ..errors import BackendUnavailableError, PresetError, RangeError
from ..presets import CALIBRATED_PRESETS, PRESETS, get_preset
from .cache_attention import RAW, CacheAttention, format_names, layer_formats, register
from .calibrate import calibrate_model, load_calibration_texts
from .metrics import Summary, WindowScores, summarize
from .model import load_model, model_folder, require_transformers
from .text import load_text, make_windows


@dataclass(frozen=True)
class EvalConfig:
    """What to score. ``model``: a GGUF file or a model folder (None: the SmolLM2 GGUF);
    ``text``: a UTF-8 file (None: ``pydoc_data.topics``); ``formats``: tq presets and
    reference formats (``bf16``, ``fp8_e4m3``); ``boundary_layers``: one run per value,
    keeping that many first and last layers uncompressed (vLLM keeps 2); ``layers``: only
    these layers compressed (None: all); ``prompt_chunk``: 0 scores every token as a decode
    step reading the whole compressed cache; N > 0 scores the first ``prompt_len`` tokens of
    each window (None: all) as a prompt that vLLM's chunked prefill feeds N tokens per step
    (each token reads its own step's keys and values raw), the rest as decode steps.
    Calibrated formats use ``calibration`` (a file from ``tq calibrate``, or ``"none"``:
    offsets 0 and gains 1, no statistics of the model), or else a
    calibration made first from ``calibration_windows`` windows of ``calibration_text`` (a
    UTF-8 file or ``builtin:NAME``, or several, the windows split over them; None:
    standard-library docstrings and source code, never the scored text)."""

    model: str | None = None
    text: str | None = None
    windows: int = 16
    window: int = 512
    batch: int = 4
    formats: tuple[str, ...] = tuple(format_names())
    boundary_layers: tuple[int, ...] = (0,)
    layers: tuple[int, ...] | None = None
    device: str = "auto"
    backend: str = "auto"
    seed: int = 0
    prompt_chunk: int = 0
    prompt_len: int | None = None
    calibration: str | None = None
    calibration_text: str | tuple[str, ...] | None = None
    calibration_windows: int = 16


LONG_CONTEXT = 32768  # the second context the calibration state is amortised over


@dataclass
class FormatResult:
    format: str
    boundary_layers: int
    compressed_layers: list[int]
    bytes_per_token: float  # per kv head, key + value, averaged over layers (uncompressed ones at bf16)
    format_bytes_per_token: int  # per kv head in a compressed layer
    summary: Summary
    # ||k - k_hat||^2 / ||k||^2 per compressed layer, over the first batch of windows
    key_rel_err: dict[int, float]
    value_rel_err: dict[int, float]
    # calibrated formats: the model's calibration state for the compressed layers (bytes), and
    # bytes_per_token with that state shared over the eval's window / over LONG_CONTEXT tokens
    state_bytes: int = 0
    bytes_at_window: float | None = None
    bytes_at_long_context: float | None = None

    @property
    def label(self) -> str:
        return self.format if self.boundary_layers == 0 else f"{self.format} (boundary {self.boundary_layers})"

    def mean_key_err(self) -> float:
        return sum(self.key_rel_err.values()) / max(len(self.key_rel_err), 1)

    def mean_value_err(self) -> float:
        return sum(self.value_rel_err.values()) / max(len(self.value_rel_err), 1)


@dataclass
class EvalResult:
    config: EvalConfig
    model: str
    text: str
    device: str
    backend: str
    num_layers: int
    head_dim: int
    num_q_heads: int
    num_kv_heads: int
    windows: int
    window: int
    text_tokens: int
    scored_tokens: int
    scored_bytes: int
    baseline: Summary
    formats: list[FormatResult]
    seconds: float
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"] = asdict(self.config)
        return d


def bytes_per_token(fmt: str, head_dim: int) -> int:
    """Key + value bytes of one token and kv head in a layer stored as ``fmt``."""
    if fmt in (RAW, "bf16"):
        return 4 * head_dim
    if fmt == "fp8_e4m3":
        return 2 * head_dim
    return get_preset(fmt).layout(head_dim).slot_size_aligned


def check_config(cfg: EvalConfig) -> None:
    """Argument values the loop cannot use; raises a TQError subclass naming the argument."""
    known = format_names()
    for fmt in cfg.formats:
        if fmt not in known:
            raise PresetError(f"format {fmt!r}: expected one of {list(known)}")
    cw = cfg.calibration_windows
    if isinstance(cw, bool) or not isinstance(cw, int) or cw < 1:
        raise RangeError(f"calibration_windows={cw!r}: expected an int >= 1")
    if not cfg.formats:
        raise RangeError("formats: expected at least one")
    for name in ("windows", "window", "batch"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < (2 if name == "window" else 1):
            raise RangeError(f"{name}={value!r}: expected an int >= {2 if name == 'window' else 1}")
    if any(b < 0 for b in cfg.boundary_layers) or not cfg.boundary_layers:
        raise RangeError(f"boundary_layers={cfg.boundary_layers!r}: expected one or more ints >= 0")
    chunk, plen = cfg.prompt_chunk, cfg.prompt_len
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
        raise RangeError(f"prompt_chunk={chunk!r}: expected an int >= 0 (0: decode semantics)")
    if plen is not None and (isinstance(plen, bool) or not isinstance(plen, int) or plen < 1 or chunk == 0):
        raise RangeError(f"prompt_len={plen!r}: expected None or an int >= 1, with prompt_chunk > 0")


def model_shape(config: Any) -> tuple[int, int, int, int]:
    hq = config.num_attention_heads
    hk = getattr(config, "num_key_value_heads", None) or hq
    d = getattr(config, "head_dim", None) or config.hidden_size // hq
    return config.num_hidden_layers, hq, hk, d


def pick_device(name: str) -> torch.device:
    from ..cli.demo import pick_device as pick

    return pick(name)


def evaluate(
    cfg: EvalConfig,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
) -> EvalResult:
    """Score every format of ``cfg`` on its model and text (see :class:`EvalConfig`)."""
    check_config(cfg)
    t0 = time.perf_counter()
    say = log or (lambda msg: None)
    transformers = require_transformers()
    attn_name = register(transformers)
    device = pick_device(cfg.device)
    backend, skipped = select_backend(device, cfg.backend)
    folder = model_folder(cfg.model, say)
    say(f"loading {folder}")
    model, tokenizer = load_model(folder, device, torch.float32, attn_name)
    num_layers, hq, hk, d = model_shape(model.config)
    if cfg.layers is not None and (bad := [i for i in cfg.layers if not 0 <= i < num_layers]):
        raise RangeError(f"layers {bad}: the model has layers 0..{num_layers - 1}")
    for fmt in cfg.formats:
        if fmt in PRESETS or fmt in CALIBRATED_PRESETS:
            get_preset(fmt).check_head_dim(d, "the model's head_dim")
    text, text_label = load_text(cfg.text)
    win = make_windows(text, tokenizer, cfg.windows, cfg.window)
    calibration, cal_backend = None, backend
    if any(fmt in CALIBRATED_PRESETS for fmt in cfg.formats):
        calibration = _calibration(cfg, model, tokenizer, num_layers, str(folder), say)
        calibration.check_model(num_layers, hk, d)
        if not backend.calibrated:
            if cfg.backend != "auto":
                raise BackendUnavailableError(
                    f"backend {cfg.backend!r} does not implement tq's calibrated formats "
                    "(pass --backend core or triton, or leave out the tq_* formats)"
                )
            cal_backend = core_backend()
    runs: list[tuple[str, int]] = []
    for fmt in cfg.formats:
        for b in cfg.boundary_layers if fmt in PRESETS or fmt in CALIBRATED_PRESETS else (0,):
            if (fmt, b) not in runs:
                runs.append((fmt, b))
    plans = {
        run: CacheAttention(
            layer_formats(num_layers, run[0], run[1], cfg.layers),
            cal_backend if run[0] in CALIBRATED_PRESETS else backend,
            seed=cfg.seed,
            prompt_chunk=cfg.prompt_chunk,
            prompt_len=cfg.prompt_len,
            calibration=calibration if run[0] in CALIBRATED_PRESETS else None,
        )
        for run in runs
    }
    scores = {run: WindowScores() for run in runs}
    base = WindowScores()
    batches = [win.ids[i : i + cfg.batch] for i in range(0, win.count, cfg.batch)]
    bar = _progress_bar(len(batches) * (1 + len(runs)), progress)
    with torch.inference_mode():
        for i, batch in enumerate(batches):
            ids = torch.tensor(batch, dtype=torch.long, device=device)
            # no CacheAttention active: every layer attends over its own K/V (cache_attention)
            base_logp = base.add(model(ids, use_cache=False).logits, ids, None)
            bar.update(1)
            for run in runs:
                # the key / value error needs one more decode of each layer's cache: the first
                # batch of windows (batch * window tokens per layer and kv head) measures it
                plans[run].measure_error = i == 0
                with plans[run]:
                    scores[run].add(model(ids, use_cache=False).logits, ids, base_logp)
                bar.update(1)
            del base_logp
    bar.close()
    results = []
    for fmt, b in runs:
        plan = plans[(fmt, b)]
        comp = [i for i, f in enumerate(plan.layer_formats) if f != RAW]
        per_layer = [bytes_per_token(f, d) for f in plan.layer_formats]
        state = len(comp) * state_bytes_per_layer(hk, d) if fmt in CALIBRATED_PRESETS else 0
        per_head = state / (num_layers * hk)
        results.append(
            FormatResult(
                format=fmt,
                boundary_layers=b,
                compressed_layers=comp,
                bytes_per_token=sum(per_layer) / num_layers,
                format_bytes_per_token=bytes_per_token(fmt, d),
                summary=summarize(scores[(fmt, b)], base, win.scored_bytes),
                key_rel_err={i: plan.errors[i].key_rel for i in comp if i in plan.errors},
                value_rel_err={i: plan.errors[i].value_rel for i in comp if i in plan.errors},
                state_bytes=state,
                bytes_at_window=amortised_bytes(sum(per_layer) / num_layers, per_head, win.length),
                bytes_at_long_context=amortised_bytes(sum(per_layer) / num_layers, per_head, LONG_CONTEXT),
            )
        )
    name = backend.description + (f" (passed over: {'; '.join(skipped)})" if skipped else "")
    if cal_backend is not backend:
        name += f"; calibrated formats: {cal_backend.description}"
    return EvalResult(
        config=cfg,
        model=str(cfg.model) if cfg.model else f"{Path(str(folder)).name} (default)",
        text=text_label,
        device=str(device),
        backend=name,
        num_layers=num_layers,
        head_dim=d,
        num_q_heads=hq,
        num_kv_heads=hk,
        windows=win.count,
        window=win.length,
        text_tokens=win.text_tokens,
        scored_tokens=sum(base.tokens),
        scored_bytes=sum(win.scored_bytes),
        baseline=summarize(base, base, win.scored_bytes),
        formats=results,
        seconds=time.perf_counter() - t0,
        meta={
            "tq_core": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "date": datetime.date.today().isoformat(),
            "model_folder": str(folder),
            **({} if calibration is None else {"calibration": dict(calibration.meta)}),
        },
    )


def _calibration(
    cfg: EvalConfig, model: Any, tokenizer: Any, num_layers: int, model_label: str, say: Callable[[str], None]
) -> Calibration:
    """The calibration of ``cfg``: read from its file, none (``NO_CALIBRATION``: offsets 0,
    gains 1), or made on its calibration text."""
    if cfg.calibration == NO_CALIBRATION:
        say("no calibration: offsets 0, gains 1")
        _, _, hk, d = model_shape(model.config)
        return Calibration.identity(num_layers, hk, d)
    if cfg.calibration is not None:
        say(f"reading calibration {cfg.calibration}")
        return Calibration.load(cfg.calibration)
    specs = cfg.calibration_text
    texts = load_calibration_texts([specs] if isinstance(specs, str) else specs)
    say(f"calibrating on {' + '.join(t.label for t in texts)}")
    return calibrate_model(
        model, tokenizer, num_layers, texts, cfg.calibration_windows, cfg.window, cfg.batch, model_label
    )


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, enabled: bool) -> Any:
    """tqdm's bar on stderr (transformers depends on tqdm), or nothing."""
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="pass", desc="tq eval", file=sys.stderr, dynamic_ncols=True)
