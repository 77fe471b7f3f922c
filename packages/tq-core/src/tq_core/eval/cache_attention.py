"""A transformers attention function that routes each layer's keys and values through
tq's paged cache.

Registered with transformers' ``AttentionInterface`` under :data:`ATTENTION_NAME`. What
each layer does is set by the active :class:`CacheAttention` (``with CacheAttention(...)``):

- ``"raw"``: plain causal softmax attention over the model's own K and V, in float32 (the
  uncompressed baseline);
- a tq preset: the layer's keys (after RoPE, as vLLM caches them) and values are written
  with the backend's ``store`` into a paged cache with shuffled blocks, and the backend's
  ``attention`` computes every query position over that cache, causally: each token's own
  K/V are stored before it attends, as in a decode step, and every key it sees is decoded
  from the cache. With ``prompt_chunk`` C > 0 the first ``prompt_len`` positions are
  instead a prompt fed in steps of C tokens, as vLLM's chunked prefill feeds it: a query
  attends to the raw K/V of its own step and to the decoded cache before it
  (:func:`prompt_chunk_attention`); later positions keep decode semantics;
- ``"bf16"`` / ``"fp8_e4m3"``: K and V rounded to that type (fp8 without scales, saturated
  at its largest finite value, as a plain fp8 cache holds them), then raw attention. These
  are reference points, not tq formats.

The windows are full (no padding), so the causal rule is the only mask; the mask
transformers passes in is not needed and not read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..calibration import Calibration, LayerCalibration
from ..cli.capacity import boundary_layer_set
from ..codec import FP8_E4M3_MAX
from ..contract import Backend
from ..errors import CalibrationError
from ..paged import gather_kv
from ..presets import CALIBRATED_PRESETS, PRESETS, get_preset

ATTENTION_NAME = "tq_eval"
REFERENCE_FORMATS: tuple[str, ...] = ("bf16", "fp8_e4m3")
RAW = "raw"
BLOCK_SIZE = 16

_active: list[CacheAttention] = []


def format_names() -> tuple[str, ...]:
    """Every format ``tq eval`` knows: vLLM's four presets, tq's calibrated formats, then
    the reference round trips."""
    return (*PRESETS, *CALIBRATED_PRESETS, *REFERENCE_FORMATS)


@dataclass
class LayerError:
    """Sums over every token and kv head of one layer: ``||x - x_hat||^2`` and ``||x||^2``."""

    key_err: float = 0.0
    key_norm: float = 0.0
    value_err: float = 0.0
    value_norm: float = 0.0

    @property
    def key_rel(self) -> float:
        return self.key_err / self.key_norm if self.key_norm else 0.0

    @property
    def value_rel(self) -> float:
        return self.value_err / self.value_norm if self.value_norm else 0.0


def raw_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """Causal attention in float32: query ``[B, Hq, T, d]``, key / value ``[B, Hk, T, d]`` ->
    ``[B, T, Hq, d]`` in the query's dtype."""
    group = query.shape[1] // key.shape[1]
    k = key.float().repeat_interleave(group, dim=1)
    v = value.float().repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(query.float(), k, v, is_causal=True, scale=scaling)
    return out.transpose(1, 2).to(query.dtype)


def raw_key_start(t: int, prompt_chunk: int, prompt_len: int | None, device: torch.device) -> torch.Tensor:
    """Per query position ``p < t``: the first key position it reads raw, under vLLM's
    serving of a prompt of ``prompt_len`` tokens (None: all ``t``) in steps of
    ``prompt_chunk`` tokens, followed by decode steps. A prompt position reads its own
    step's keys raw (from the step's start); a decode position reads none raw (``p + 1``)."""
    pos = torch.arange(t, device=device)
    n = t if prompt_len is None else min(prompt_len, t)
    return torch.where(pos < n, pos // prompt_chunk * prompt_chunk, pos + 1)


def prompt_chunk_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    key_hat: torch.Tensor,
    value_hat: torch.Tensor,
    raw_start: torch.Tensor,
    scaling: float,
) -> torch.Tensor:
    """Causal attention in float32 where query position ``p`` reads key / value ``j`` raw
    (``key``, ``value``) when ``j >= raw_start[p]`` and decoded from the cache (``key_hat``,
    ``value_hat``) before it. query ``[B, Hq, T, d]``, the others ``[B, Hk, T, d]``,
    ``raw_start`` ``[T]`` (:func:`raw_key_start`) -> ``[B, T, Hq, d]`` in the query's dtype."""
    group = query.shape[1] // key.shape[1]
    t = query.shape[2]

    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.float().repeat_interleave(group, dim=1)

    q = query.float()
    pos = torch.arange(t, device=query.device)
    raw = pos[None, :] >= raw_start[:, None]  # [T, T]: (query, key) read raw
    causal = pos[None, :] <= pos[:, None]
    scores = torch.where(raw, q @ heads(key).transpose(-1, -2), q @ heads(key_hat).transpose(-1, -2)) * scaling
    p = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    out = (p * raw) @ heads(value) + (p * ~raw) @ heads(value_hat)
    return out.transpose(1, 2).to(query.dtype)


def round_trip(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x`` as a bf16 or a scale-free fp8 e4m3 cache holds it, back in ``x``'s dtype."""
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    if fmt == "fp8_e4m3":
        return x.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype)
    raise ValueError(f"unknown reference format {fmt!r}")


@dataclass
class CacheAttention:
    """Which format each layer uses, the backend that runs tq's formats, and the per-layer
    key / value errors seen so far.

    ``layer_formats[i]`` is ``"raw"``, a preset name or a reference format. ``measure_error``
    decodes each layer's cache once more (:func:`tq_core.gather_kv`) to record how far the
    keys and values attention read are from the model's. ``prompt_chunk`` > 0 serves the
    first ``prompt_len`` positions (None: all) as a prompt in steps of that many tokens
    (module docstring); 0 gives every position decode semantics. ``calibration``: the
    model's, for calibrated formats.
    """

    layer_formats: Sequence[str]
    backend: Backend
    measure_error: bool = True
    seed: int = 0
    prompt_chunk: int = 0
    prompt_len: int | None = None
    calibration: Calibration | None = None
    errors: dict[int, LayerError] = field(default_factory=dict)
    _layer_cal: dict[tuple[int, str], LayerCalibration] = field(default_factory=dict, repr=False)

    def __enter__(self) -> CacheAttention:
        _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _active.remove(self)

    def __call__(
        self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float
    ) -> torch.Tensor:
        fmt = self.layer_formats[layer]
        if fmt == RAW:
            return raw_attention(query, key, value, scaling)
        if fmt in REFERENCE_FORMATS:
            k, v = round_trip(key, fmt), round_trip(value, fmt)
            if self.measure_error:
                self._record(layer, key, value, k, v)
            if self.prompt_chunk > 0:
                start = raw_key_start(key.shape[2], self.prompt_chunk, self.prompt_len, key.device)
                return prompt_chunk_attention(query, key, value, k, v, start, scaling)
            return raw_attention(query, k, v, scaling)
        return self._through_cache(layer, fmt, query, key, value, scaling)

    def _through_cache(
        self, layer: int, fmt: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float
    ) -> torch.Tensor:
        preset = get_preset(fmt)
        b, hk, t, d = key.shape
        hq = query.shape[1]
        dev = key.device
        cal = self._calibration(layer, dev) if preset.calibrated else None
        cal_args: dict[str, Any] = {} if cal is None else {"calibration": cal}
        nblk = -(-t // BLOCK_SIZE)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + layer)
        # physical blocks in a shuffled order, so that paging is exercised as in serving
        table = torch.randperm(b * nblk, generator=gen).view(b, nblk).to(torch.int32).to(dev)
        pos = torch.arange(t, device=dev)
        slots = (table[:, pos // BLOCK_SIZE].long() * BLOCK_SIZE + pos % BLOCK_SIZE).reshape(-1)
        slot_bytes = preset.layout(d).slot_size_aligned
        cache = torch.zeros(b * nblk, BLOCK_SIZE, hk, slot_bytes, dtype=torch.uint8, device=dev)
        k = key.transpose(1, 2).reshape(b * t, hk, d).contiguous()
        v = value.transpose(1, 2).reshape(b * t, hk, d).contiguous()
        q = query.transpose(1, 2).reshape(b * t, hq, d).contiguous()
        assert self.backend.store is not None
        store_args = {} if cal is None else {"positions": pos.repeat(b), **cal_args}
        self.backend.store(k, v, cache, slots, preset, **store_args)
        if self.measure_error or self.prompt_chunk > 0:
            decoded = [gather_kv(cache, table[r], t, preset, d, check_values=False, **cal_args) for r in range(b)]
            k_hat = torch.stack([kv[0] for kv in decoded]).view(b * t, hk, d)
            v_hat = torch.stack([kv[1] for kv in decoded]).view(b * t, hk, d)
            if self.measure_error:
                self._record(layer, k, v, k_hat, v_hat)
        if self.prompt_chunk > 0:
            start = raw_key_start(t, self.prompt_chunk, self.prompt_len, dev)
            k_hat, v_hat = (x.view(b, t, hk, d).transpose(1, 2) for x in (k_hat, v_hat))
            return prompt_chunk_attention(query, key, value, k_hat, v_hat, start, scaling)
        seq_lens = torch.full((b,), t, dtype=torch.int32, device=dev)
        qsl = torch.arange(0, (b + 1) * t, t, dtype=torch.int32, device=dev)
        hints: dict[str, Any] = {"max_query_len": t} if self.backend.takes_max_query_len else {}
        out = self.backend.attention(q, cache, table, seq_lens, qsl, preset, scaling, **hints, **cal_args)
        return out.view(b, t, hq, d).to(query.dtype)

    def _calibration(self, layer: int, device: torch.device) -> LayerCalibration:
        if self.calibration is None:
            raise CalibrationError("a calibrated format needs the model's calibration (tq calibrate, or tq eval's own)")
        key = (layer, str(device))
        if key not in self._layer_cal:
            self._layer_cal[key] = self.calibration.layer(layer).to(device)
        return self._layer_cal[key]

    def _record(self, layer: int, k: torch.Tensor, v: torch.Tensor, k_hat: torch.Tensor, v_hat: torch.Tensor) -> None:
        e = self.errors.setdefault(layer, LayerError())
        k, v = k.float(), v.float()
        e.key_err += float((k - k_hat.float()).square().sum())
        e.key_norm += float(k.square().sum())
        e.value_err += float((v - v_hat.float()).square().sum())
        e.value_norm += float(v.square().sum())


def layer_formats(
    num_layers: int, fmt: str, boundary_layers: int = 0, layers: Sequence[int] | None = None
) -> list[str]:
    """Per-layer formats: ``fmt`` on the chosen ``layers`` (default all), less the first
    and last ``boundary_layers`` (vLLM's rule keeps them in the model's dtype: each side
    capped at half the layers), ``"raw"`` elsewhere."""
    kept = boundary_layer_set(num_layers, boundary_layers)
    chosen = set(range(num_layers)) if layers is None else set(layers)
    return [fmt if i in chosen and i not in kept else RAW for i in range(num_layers)]


def _dispatch(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if key.shape[2] != query.shape[2]:
        raise RuntimeError(
            f"tq eval scores whole windows without a KV cache: {key.shape[2]} keys for {query.shape[2]} queries"
        )
    if not _active:
        return raw_attention(query, key, value, scaling), None
    return _active[-1](module.layer_idx, query, key, value, scaling), None


def register(transformers: Any) -> str:
    """Register the dispatcher (and the causal mask it needs none of) with transformers;
    returns the name to pass as ``attn_implementation``."""
    transformers.AttentionInterface.register(ATTENTION_NAME, _dispatch)
    masks = getattr(transformers, "AttentionMaskInterface", None)
    if masks is not None:
        masks.register(ATTENTION_NAME, _no_mask)
    return ATTENTION_NAME


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None
