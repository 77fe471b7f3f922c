"""Calibrating tq's calibrated formats on a model: run it over windows of a text and
collect the statistics of every layer's queries, keys and values
(:class:`tq_core.CalibrationStats`), plus each layer's output projection.

The default text is other prose than ``tq eval``'s: the docstrings of a fixed list of
standard-library modules, so that an evaluation never scores the text it was calibrated on.
"""

from __future__ import annotations

import datetime
import importlib
import inspect
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..__about__ import __version__
from ..calibration import Calibration, CalibrationStats
from . import cache_attention as ca
from .text import make_windows, read_utf8

DEFAULT_CALIBRATION_TEXT = "stdlib docstrings"
_MODULES = (
    "argparse", "asyncio", "collections", "dataclasses", "email", "functools", "http.client", "itertools",
    "json", "logging", "pathlib", "re", "subprocess", "threading", "typing", "unittest",
)  # fmt: skip
_MIN_DOC = 200


def default_calibration_text() -> str:
    """Docstrings of at least 200 characters of the members of a fixed list of
    standard-library modules, each once, in a fixed order."""
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


def load_calibration_text(path: str | Path | None) -> tuple[str, str]:
    """``(text, label)`` of a UTF-8 file, or of :func:`default_calibration_text`."""
    if path is None:
        return default_calibration_text(), f"{DEFAULT_CALIBRATION_TEXT} (Python {sys.version.split()[0]})"
    return read_utf8(path, "calibration text"), str(path)


@dataclass
class _Recorder:
    """The attention function while calibrating: records, then attends over raw K/V."""

    stats: CalibrationStats

    def __call__(
        self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float
    ) -> torch.Tensor:
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


def calibrate_model(
    model: Any,
    tokenizer: Any,
    num_layers: int,
    text: str,
    text_label: str,
    windows: int = 16,
    window: int = 512,
    batch: int = 4,
    model_label: str = "",
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """The calibration of a model loaded with ``tq eval``'s attention function
    (:func:`tq_core.eval.load_model`), from ``windows`` windows of ``window`` tokens of
    ``text`` spread evenly over it."""
    t0 = time.perf_counter()
    win = make_windows(text, tokenizer, windows, window)
    device = next(model.parameters()).device
    recorder = _Recorder(CalibrationStats())
    ca._active.append(recorder)  # type: ignore[arg-type]
    try:
        with torch.inference_mode():
            for i in range(0, win.count, batch):
                ids = torch.tensor(win.ids[i : i + batch], dtype=torch.long, device=device)
                model(ids, use_cache=False)
                if log:
                    log(f"calibrating: {min(i + batch, win.count)}/{win.count} windows")
    finally:
        ca._active.remove(recorder)  # type: ignore[arg-type]
    meta = {
        "model": model_label,
        "text": text_label,
        "windows": win.count,
        "window": win.length,
        "seconds": round(time.perf_counter() - t0, 1),
        "tq_core": __version__,
        "date": datetime.date.today().isoformat(),
    }
    return recorder.stats.finish(num_layers, output_weights(model, num_layers), meta)
