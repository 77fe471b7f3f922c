"""Calibrating tq's calibrated formats on a model: run it over windows of a text and
collect the statistics of every layer's queries, keys and values
(:class:`tq_core.CalibrationStats`), plus each layer's output projection.

The default text is other text than ``tq eval``'s, and mixed, so that a calibration carries
across domains: the docstrings of a fixed list of standard-library modules (English
reference prose) and those modules' source code (Python, with its comments), half of the
windows from each. An evaluation never scores the text it was calibrated on.
"""

from __future__ import annotations

import datetime
import importlib
import inspect
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..__about__ import __version__
from ..calibration import Calibration, CalibrationStats, HeldOutReport, held_out_report
from ..errors import RangeError
from . import cache_attention as ca
from .text import make_windows, read_utf8

BUILTIN = "builtin:"  # --text builtin:NAME picks one of BUILTIN_TEXTS
DEFAULT_CALIBRATION_TEXTS = ("builtin:docstrings", "builtin:source")
DEFAULT_FIRST_POSITIONS = 256
_MODULES = (
    "argparse", "asyncio", "collections", "dataclasses", "email", "functools", "http.client", "itertools",
    "json", "logging", "pathlib", "re", "subprocess", "threading", "typing", "unittest",
)  # fmt: skip
_MIN_DOC = 200


def default_calibration_text() -> str:
    """Docstrings of at least 200 characters of the members of a fixed list of
    standard-library modules, each once, in a fixed order (``builtin:docstrings``)."""
    parts: list[str] = []
    with warnings.catch_warnings():  # typing's deprecated aliases warn when listed
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in _MODULES:
            module = importlib.import_module(name)
            for _, obj in sorted(inspect.getmembers(module), key=lambda m: m[0]):
                doc = inspect.getdoc(obj)
                if doc and len(doc) >= _MIN_DOC:
                    parts.append(doc)
    return "\n\n".join(dict.fromkeys(parts))


def source_calibration_text() -> str:
    """The source code of the same standard-library modules that have Python source, in
    the same order (``builtin:source``; a package's ``__init__``)."""
    parts = []
    for name in _MODULES:
        module = importlib.import_module(name)
        if getattr(module, "__file__", None):
            try:
                parts.append(inspect.getsource(module))
            except (OSError, TypeError):  # an installation without the .py files
                continue
    if not parts:
        raise RangeError("builtin:source: this Python installation holds no source of the standard library")
    return "\n\n".join(parts)


BUILTIN_TEXTS: dict[str, Callable[[], str]] = {
    "docstrings": default_calibration_text,
    "source": source_calibration_text,
}
_BUILTIN_LABELS = {"docstrings": "stdlib docstrings", "source": "stdlib source"}


@dataclass(frozen=True)
class CalibrationText:
    """One text of a calibration and its label (the file's path, or the built-in's name)."""

    text: str
    label: str


def load_calibration_texts(specs: Sequence[str | Path] | None) -> list[CalibrationText]:
    """The texts of ``specs``: UTF-8 files, or ``builtin:docstrings`` / ``builtin:source``;
    None or empty: :data:`DEFAULT_CALIBRATION_TEXTS` (both built-ins)."""
    out = []
    for spec in specs or DEFAULT_CALIBRATION_TEXTS:
        name = str(spec)
        if name.startswith(BUILTIN):
            kind = name[len(BUILTIN) :]
            if kind not in BUILTIN_TEXTS:
                raise RangeError(
                    f"calibration text {name!r}: the built-in texts are {[BUILTIN + k for k in BUILTIN_TEXTS]}"
                )
            label = f"{_BUILTIN_LABELS[kind]} (Python {sys.version.split()[0]})"
            out.append(CalibrationText(BUILTIN_TEXTS[kind](), label))
        else:
            out.append(CalibrationText(read_utf8(spec, "calibration text"), name))
    return out


def load_calibration_text(path: str | Path | None) -> tuple[str, str]:
    """``(text, label)`` of a UTF-8 file, or of the built-in docstrings (one text; the
    default calibration mixes several: :func:`load_calibration_texts`)."""
    (one,) = load_calibration_texts([path if path is not None else "builtin:docstrings"])
    return one.text, one.label


def split_count(count: int, parts: int) -> list[int]:
    """``count`` spread over ``parts`` as evenly as possible, the first parts taking one more."""
    if parts < 1 or count < 0:
        raise RangeError(f"split_count({count}, {parts}): expected count >= 0 and parts >= 1")
    return [count // parts + (i < count % parts) for i in range(parts)]


def spread(n: int, count: int) -> list[int]:
    """``count`` indices into ``range(n)`` spread evenly, the first 0 and the last ``n - 1``."""
    if count <= 0 or n <= 0:
        return []
    if count == 1:
        return [0]
    return [round(i * (n - 1) / (count - 1)) for i in range(count)]


@dataclass
class CalibrationWindows:
    """What a calibration runs the model over: ``ids``, windows of token ids (each text's
    share spread evenly over it), and ``first``, single tokens whose position-0 keys and
    values sharpen the attention sink's offsets (spread over each text's tokens);
    ``texts``: per text, its label and windows."""

    ids: list[list[int]]
    first: list[int]
    texts: list[dict[str, Any]] = field(default_factory=list)


def calibration_windows(
    texts: Sequence[CalibrationText], tokenizer: Any, windows: int, window: int, first_positions: int = 0
) -> CalibrationWindows:
    """``windows`` windows of ``window`` tokens split over ``texts`` (:func:`split_count`: the
    first texts take one more; a text whose share is 0 is left out), and ``first_positions``
    single tokens split the same way."""
    if not texts:
        raise RangeError("calibration: no text")
    if first_positions < 0:
        raise RangeError(f"first_positions={first_positions}: expected an int >= 0")
    out = CalibrationWindows([], [])
    for text, n, f in zip(
        texts, split_count(windows, len(texts)), split_count(first_positions, len(texts)), strict=True
    ):
        if n == 0:
            continue
        win = make_windows(text.text, tokenizer, n, window)
        out.ids.extend(win.ids)
        if f:
            ids = tokenizer(text.text, add_special_tokens=False)["input_ids"]
            out.first.extend(ids[j] for j in spread(len(ids), f))
        out.texts.append({"label": text.label, "windows": win.count})
    return out


@dataclass
class _Recorder:
    """The attention function while calibrating: records, then attends over raw K/V
    (``first_only``: records position 0's keys and values only)."""

    stats: CalibrationStats
    first_only: bool = False

    def __call__(
        self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float
    ) -> torch.Tensor:
        if self.first_only:
            self.stats.add_first(layer, key, value)
        else:
            self.stats.add(layer, query, key, value)
        return ca.raw_attention(query, key, value, scaling)


def output_weights(model: Any, num_layers: int) -> list[torch.Tensor | None]:
    """Each layer's attention output projection (``o_proj.weight``), where the model has one."""
    found: dict[int, torch.Tensor] = {}
    for module in model.modules():
        idx = getattr(module, "layer_idx", None)
        proj = getattr(module, "o_proj", None)
        if isinstance(idx, int) and isinstance(getattr(proj, "weight", None), torch.Tensor):
            found[idx] = proj.weight.detach()
    return [found.get(i) for i in range(num_layers)]


def collect_stats(
    model: Any,
    windows: CalibrationWindows,
    batch: int = 4,
    log: Callable[[str], None] | None = None,
    what: str = "calibrating",
) -> CalibrationStats:
    """The statistics of a model loaded with ``tq eval``'s attention function over
    ``windows`` (its single tokens in batches of 256)."""
    device = next(model.parameters()).device
    recorder = _Recorder(CalibrationStats())
    ca._active.append(recorder)  # type: ignore[arg-type]
    try:
        with torch.inference_mode():
            count = len(windows.ids)
            for i in range(0, count, batch):
                ids = torch.tensor(windows.ids[i : i + batch], dtype=torch.long, device=device)
                model(ids, use_cache=False)
                if log:
                    log(f"{what}: {min(i + batch, count)}/{count} windows")
            recorder.first_only = True
            for i in range(0, len(windows.first), 256):
                ids = torch.tensor(windows.first[i : i + 256], dtype=torch.long, device=device)[:, None]
                model(ids, use_cache=False)
    finally:
        ca._active.remove(recorder)  # type: ignore[arg-type]
    return recorder.stats


def calibrate_model(
    model: Any,
    tokenizer: Any,
    num_layers: int,
    texts: Sequence[CalibrationText],
    windows: int = 16,
    window: int = 512,
    batch: int = 4,
    model_label: str = "",
    log: Callable[[str], None] | None = None,
    first_positions: int = DEFAULT_FIRST_POSITIONS,
) -> Calibration:
    """The calibration of a model loaded with ``tq eval``'s attention function
    (:func:`tq_core.eval.load_model`), from ``windows`` windows of ``window`` tokens split
    over ``texts`` and ``first_positions`` more samples of position 0
    (:func:`calibration_windows`)."""
    t0 = time.perf_counter()
    cw = calibration_windows(texts, tokenizer, windows, window, first_positions)
    stats = collect_stats(model, cw, batch, log)
    meta = {
        "model": model_label,
        "text": " + ".join(t["label"] for t in cw.texts),
        "texts": cw.texts,
        "windows": len(cw.ids),
        "window": window,
        "first_positions": len(cw.first),
        "seconds": round(time.perf_counter() - t0, 1),
        "tq_core": __version__,
        "date": datetime.date.today().isoformat(),
    }
    return stats.finish(num_layers, output_weights(model, num_layers), meta)


def held_out(
    model: Any,
    tokenizer: Any,
    calibration: Calibration,
    texts: Sequence[CalibrationText],
    windows: int = 4,
    window: int = 512,
    batch: int = 4,
    log: Callable[[str], None] | None = None,
    first_positions: int = DEFAULT_FIRST_POSITIONS,
) -> HeldOutReport:
    """How ``calibration`` carries to the held-out ``texts`` (:func:`tq_core.calibration.held_out_report`)."""
    cw = calibration_windows(texts, tokenizer, windows, window, first_positions)
    stats = collect_stats(model, cw, batch, log, "held-out text")
    return held_out_report(calibration, stats, output_weights(model, calibration.num_layers))
