"""tq's calibrated formats in vLLM, chosen with ``--additional-config`` (pure torch, no vLLM).

vLLM's ``--kv-cache-dtype`` knows only its own names, so a calibrated format rides on the
``turboquant_*`` dtype of no fewer bytes and is named in vLLM's additional config, which
reaches every process::

    vllm serve MODEL --kv-cache-dtype turboquant_k3v4_nc \\
        --additional-config '{"tq_format": "tq_k4v3", "tq_calibration": "/path/model.cal"}'

The file comes from ``tq calibrate --model MODEL --out /path/model.cal``; ``"tq_calibration":
"none"`` serves without one (offsets 0, gains 1 in every layer: docs/accuracy.md says what
that costs). tq's backend then
publishes the format's slot size to vLLM (its memory accounting and cache shape follow),
stores each layer's keys and values against that layer's calibration and attends over
them, on tq-core (vLLM's CPU build, or ``TQ_VLLM_IMPL=core``) or tq-triton (cuda, xpu).
"""

from __future__ import annotations

import functools
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tq_core import (
    CALIBRATED_PRESETS,
    NO_CALIBRATION,
    Calibration,
    LayerCalibration,
    Preset,
    PresetError,
    get_preset,
)

FORMAT_KEY = "tq_format"
CALIBRATION_KEY = "tq_calibration"
# the vLLM dtype each calibrated format rides on: the one whose slot it fits
CARRIER = {"tq_k4v3": "turboquant_k3v4_nc", "tq_k4v4": "turboquant_4bit_nc", "tq_k6v5": "turboquant_k8v4"}

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class FormatChoice:
    """A calibrated format named in vLLM's additional config, with its calibration file
    (``NO_CALIBRATION``: none, the identity calibration)."""

    preset: Preset
    calibration_path: str

    @property
    def uncalibrated(self) -> bool:
        return self.calibration_path == NO_CALIBRATION

    def check_carrier(self, kv_cache_dtype: str, head_dim: int) -> None:
        """The format must fit the slot of the ``turboquant_*`` dtype vLLM was started with."""
        mine = self.preset.layout(head_dim).slot_size_aligned
        try:
            carrier = get_preset(kv_cache_dtype)
        except PresetError:
            carrier = None
        if carrier is None or carrier.calibrated or carrier.layout(head_dim).slot_size_aligned < mine:
            raise PresetError(
                f"tq-vllm: {FORMAT_KEY}={self.preset.name!r} needs --kv-cache-dtype {CARRIER[self.preset.name]} "
                f"(a turboquant_* dtype whose slot holds its {mine} bytes), got {kv_cache_dtype!r}"
            )

    @property
    def calibration(self) -> Calibration:
        return load_calibration(self.calibration_path)

    def layer_calibration(
        self, layer_name: str | None, local_heads: int, head_dim: int, tp_rank: int, tp_size: int, device: Any
    ) -> LayerCalibration:
        """The calibration of one attention layer's ``local_heads`` kv heads on this rank, on
        ``device``: the file's (:func:`layer_calibration`), or the identity where
        :attr:`uncalibrated`."""
        if self.uncalibrated:
            return LayerCalibration.identity(local_heads, head_dim, device)
        return layer_calibration(self.calibration, layer_name, local_heads, tp_rank, tp_size, device)


def format_choice(additional_config: object) -> FormatChoice | None:
    """The calibrated format of vLLM's ``additional_config`` (None when it names none)."""
    if not isinstance(additional_config, Mapping) or FORMAT_KEY not in additional_config:
        return None
    name = additional_config[FORMAT_KEY]
    if not isinstance(name, str) or name not in CALIBRATED_PRESETS:
        raise PresetError(
            f"tq-vllm: additional config {FORMAT_KEY}={reprlib.repr(name)}: "
            f"expected one of {sorted(CALIBRATED_PRESETS)}"
        )
    path = additional_config.get(CALIBRATION_KEY)
    if not isinstance(path, str) or not path:
        raise PresetError(
            f"tq-vllm: {FORMAT_KEY}={name!r} needs {CALIBRATION_KEY!r}: the path of a file from "
            f"`tq calibrate --model MODEL --out FILE`, or {NO_CALIBRATION!r} to serve without one (offsets 0, "
            "gains 1: lower quality, docs/accuracy.md)"
        )
    return FormatChoice(CALIBRATED_PRESETS[name], path)


@functools.cache
def load_calibration(path: str) -> Calibration:
    """A calibration file, read once per process."""
    return Calibration.load(path)


def layer_index(layer_name: str | None) -> int:
    """The decoder layer of an attention layer's name (``model.layers.7.self_attn.attn``: 7)."""
    m = _LAYER_INDEX.search(layer_name or "")
    if m is None:
        raise PresetError(f"tq-vllm: cannot tell the decoder layer of attention layer {layer_name!r}")
    return int(m.group(1))


def kv_head_range(total: int, local: int, tp_rank: int, tp_size: int) -> tuple[int, int]:
    """The model's kv heads ``[start, stop)`` that tensor-parallel rank ``tp_rank`` holds
    ``local`` of: a contiguous share, or one head replicated over several ranks."""
    if local * tp_size == total:
        return tp_rank * local, (tp_rank + 1) * local
    if local == 1 and tp_size > total and tp_size % total == 0:
        head = tp_rank // (tp_size // total)
        return head, head + 1
    raise PresetError(f"tq-vllm: {local} kv heads per rank of {tp_size} does not divide the model's {total}")


def layer_calibration(
    calibration: Calibration, layer_name: str | None, local_heads: int, tp_rank: int, tp_size: int, device: Any
) -> LayerCalibration:
    """The calibration of one attention layer's kv heads on this rank, on ``device``."""
    lay = calibration.layer(layer_index(layer_name))
    start, stop = kv_head_range(lay.num_kv_heads, local_heads, tp_rank, tp_size)
    return LayerCalibration(
        **{name: getattr(lay, name)[start:stop].to(device) for name in LayerCalibration.__dataclass_fields__}
    )


def token_positions(query_start_loc_cpu: torch.Tensor, seq_lens_cpu: torch.Tensor, num_reqs: int) -> torch.Tensor:
    """Each query row's position in its sequence: row ``j`` of request ``r`` with ``q_len``
    rows and ``seq_len`` tokens sits at ``seq_len - q_len + j`` (host tensors in, int32 out)."""
    qsl = query_start_loc_cpu[: num_reqs + 1].to(torch.int64)
    q_lens = qsl[1:] - qsl[:-1]
    start = seq_lens_cpu[:num_reqs].to(torch.int64) - q_lens
    rows = torch.arange(int(qsl[-1]), dtype=torch.int64)
    req = torch.repeat_interleave(torch.arange(num_reqs), q_lens)
    return (start[req] + rows - qsl[req]).to(torch.int32)
