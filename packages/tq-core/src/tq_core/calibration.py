"""Calibration of tq's calibrated formats: per-layer statistics of one model's keys and
values that those formats encode against (docs/format.md, "Calibrated formats").

Per layer and kv head, six vectors of ``head_dim`` values, held in fp16 (the state a
server keeps per model, counted in the formats' bytes):

- ``key_offset`` (mu): the mean key, after RoPE as the cache holds keys, over every
  position but the first; ``key_first_offset`` (mu0): the mean key at position 0.
- ``key_gain`` (a): a per-channel gain. The cache codes ``a * (k - mu_p)`` (``mu_p`` is
  mu0 at position 0, mu elsewhere) and reads it back as ``dec / a + mu_p``. Attention over
  the decoded keys is plain softmax attention: a kernel may score ``q / a`` against the
  coded keys, because ``(q / a) . (a * (k - mu)) = q . k - q . mu`` and a shift shared by
  every key of a row leaves the softmax unchanged; only position 0 needs its own shift
  ``q . (mu0 - mu)`` back.
- ``value_offset``, ``value_first_offset``, ``value_gain`` (nu, nu0, b): the same for
  values; the coded value is ``b * (v - nu_p)``, decoded as ``dec / b + nu_p``.

Why: a head's keys share a large offset (on SmolLM2-135M most of a key's energy), which a
per-token code spends its bits on and attention does not need; the first token of a
sequence (the attention sink) sits far from that offset and takes much of the attention
mass; and the error a query sees is ``q . e``, so channels where queries are large deserve
a finer code. The gains minimise the expected squared score error of a code whose error
is spread evenly over the coded vector's channels, which is what the Hadamard rotation
makes of TurboQuant's error: ``a_c = (E[q_c^2] / Var[k_c]) ** (1/4)``, and for values, with
the output projection's squared column norms ``g_c`` of the heads that read the value,
``b_c = (g_c / Var[v_c]) ** (1/4)``. Both are scaled so the coded vectors keep the
variance of the originals.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from .errors import CalibrationError, ShapeError

FILE_FORMAT = "tq-calibration"
# the name that asks for no calibration file (``tq eval --calibration none``, tq-vllm's
# ``"tq_calibration": "none"``): :meth:`LayerCalibration.identity` in every layer
NO_CALIBRATION = "none"
FILE_VERSION = 1
# regularisation of the per-channel statistics, as a fraction of their mean: a channel that
# never varies gets a finite gain
_REG = 1e-3


@dataclass(frozen=True)
class LayerCalibration:
    """One layer's calibration: six float32 ``[num_kv_heads, head_dim]`` tensors (see the
    module docstring).

    The rule for what a calibration must be, which the constructor checks and so
    :meth:`Calibration.load` too, and :meth:`Calibration.save` checks again before it writes:
    :meth:`check_tensors` (dense float32 tensors of one shape on one device) and
    :meth:`check_values` (what a file holds: every value finite in fp16, every gain positive
    in fp16). A file holds the values rounded to fp16. A call that takes a calibration runs
    :meth:`check_tensors` again (host-side, cheap); values are not read there."""

    key_offset: torch.Tensor
    key_first_offset: torch.Tensor
    key_gain: torch.Tensor
    value_offset: torch.Tensor
    value_first_offset: torch.Tensor
    value_gain: torch.Tensor

    def __post_init__(self) -> None:
        self.check_tensors()
        self.check_values()

    @classmethod
    def identity(cls, num_kv_heads: int, head_dim: int, device: torch.device | str = "cpu") -> LayerCalibration:
        """The calibration that changes nothing: offsets 0, gains 1. A calibrated format
        with it codes keys and values as they are (Lloyd-Max codes of the rotated vectors,
        and for ``tq_k4v4`` symmetric values), for serving without statistics of the model
        (docs/accuracy.md: what that costs on SmolLM2)."""
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (num_kv_heads, head_dim)):
            raise ShapeError(f"identity calibration: num_kv_heads={num_kv_heads!r}, head_dim={head_dim!r}")
        zero = torch.zeros(num_kv_heads, head_dim, dtype=torch.float32, device=device)
        one = torch.ones(num_kv_heads, head_dim, dtype=torch.float32, device=device)
        return cls(zero, zero.clone(), one, zero.clone(), zero.clone(), one.clone())

    def check_tensors(self, what: str = "") -> None:
        """Raise :class:`CalibrationError` unless the six tensors are dense float32
        ``[num_kv_heads, head_dim]`` tensors with data (not sparse, not on the meta device), all
        of one shape and on one device (messages start with ``what``). Host-side only, no
        device read: every call that takes a calibration runs it, because a tensor can be
        resized in place after construction and the kernels read all six through
        ``key_offset``'s shape."""
        tensors = [getattr(self, name) for name in _FIELDS]
        first = tensors[0]
        if _dense_float32_matrix(first):
            shape, device = first.shape, first.device
            for t in tensors:
                if not (
                    isinstance(t, torch.Tensor)
                    and t.layout == torch.strided
                    and t.dtype == torch.float32
                    and t.shape == shape
                    and t.device == device
                ):
                    break
            else:
                return
        # name the first tensor that breaks the rule
        for field_name, t in zip(_FIELDS, tensors, strict=True):
            name = what + field_name
            if not _dense_float32_matrix(t):
                raise CalibrationError(
                    f"{name}: expected a dense float32 [num_kv_heads, head_dim] tensor with data, got {_desc(t)}"
                )
            if t.shape != first.shape:
                raise CalibrationError(f"{name}: shape {tuple(t.shape)} differs from key_offset's {tuple(first.shape)}")
            if t.device != first.device:
                raise CalibrationError(f"{name}: on {t.device}, key_offset on {first.device}")

    def check_values(self) -> None:
        """Raise :class:`CalibrationError` unless every value rounds to a finite fp16 number
        (``|x| < 65520``) and every gain to a positive one (``> 2^-25``): a file holds them in
        fp16. Reads the tensors (a device sync)."""
        for f in fields(self):
            h = self.values_of(f.name).to(torch.float16)
            if not bool(torch.isfinite(h).all()):
                raise CalibrationError(
                    f"{f.name}: holds a NaN, an infinity or a value beyond fp16's range (|x| >= 65520)"
                )
            if f.name.endswith("gain") and not bool((h > 0).all()):
                raise CalibrationError(f"{f.name}: every gain must be positive in fp16 (above 2^-25)")

    @property
    def num_kv_heads(self) -> int:
        return self.key_offset.shape[0]

    @property
    def head_dim(self) -> int:
        return self.key_offset.shape[1]

    def to(self, device: torch.device | str) -> LayerCalibration:
        return LayerCalibration(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def kernel_vectors(self) -> tuple[torch.Tensor, ...]:
        """The six tensors in the order tq's kernels take them (key gain, key offset, key
        first-position offset, then the same for values), each contiguous."""
        names = ("key_gain", "key_offset", "key_first_offset", "value_gain", "value_offset", "value_first_offset")
        return tuple(self.values_of(n).contiguous() for n in names)

    def values_of(self, name: str) -> torch.Tensor:
        """The tensor ``name`` detached: tq codes and attends with a calibration's values, so
        tensors that require grad (a module's parameters) are taken as they are now."""
        return getattr(self, name).detach()

    def check(self, num_kv_heads: int, head_dim: int, device: torch.device) -> None:
        """Raise :class:`ShapeError` unless this layer's tensors fit ``num_kv_heads`` x
        ``head_dim`` on ``device``, :class:`CalibrationError` unless they hold
        :meth:`check_tensors`."""
        self.check_tensors("calibration ")
        if (self.num_kv_heads, self.head_dim) != (num_kv_heads, head_dim):
            raise ShapeError(
                f"calibration: made for {self.num_kv_heads} kv heads of head_dim {self.head_dim}, "
                f"the cache has {num_kv_heads} of {head_dim}"
            )
        if self.key_offset.device != device:
            raise ShapeError(f"calibration: on {self.key_offset.device}, the cache on {device}: move it with .to()")

    def offset(self, name: str, first: torch.Tensor | None) -> torch.Tensor:
        """The offsets of ``name`` (``"key"`` or ``"value"``) each token is coded against:
        ``[N, H, d]`` where ``first`` (bool ``[N]``) marks position 0, else ``[H, d]``."""
        rest = self.values_of(f"{name}_offset")
        if first is None:
            return rest
        return torch.where(first[:, None, None], self.values_of(f"{name}_first_offset"), rest)

    def code(
        self, key: torch.Tensor, value: torch.Tensor, first: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, H, d]`` keys and values -> the vectors the cache codes; ``first`` ``[N]``
        bool marks tokens at position 0 (None: none)."""
        k = (key.float() - self.offset("key", first)) * self.values_of("key_gain")
        v = (value.float() - self.offset("value", first)) * self.values_of("value_gain")
        return k, v

    def uncode(
        self, key: torch.Tensor, value: torch.Tensor, first: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse of :meth:`code` on decoded vectors."""
        k = key / self.values_of("key_gain") + self.offset("key", first)
        v = value / self.values_of("value_gain") + self.offset("value", first)
        return k, v


# the fields in the order they are declared
_FIELDS = tuple(f.name for f in fields(LayerCalibration))


def _dense_float32_matrix(t: object) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.layout == torch.strided
        and t.device.type != "meta"
        and t.dim() == 2
        and t.dtype == torch.float32
    )


def _desc(t: object) -> str:
    if isinstance(t, torch.Tensor):
        where = "" if t.layout == torch.strided else f" ({t.layout})"
        where += " on the meta device" if t.device.type == "meta" else ""
        return f"{t.dtype} tensor of shape {tuple(t.shape)}{where}"
    return type(t).__name__


@dataclass(frozen=True)
class Calibration:
    """A model's calibration: one :class:`LayerCalibration` per attention layer, and what
    it was made from (``meta``: model, text, tokens, seconds, tq-core version)."""

    layers: tuple[LayerCalibration, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.layers:
            raise CalibrationError("calibration: has no layers")
        first = self.layers[0]
        for i, lay in enumerate(self.layers):
            if not isinstance(lay, LayerCalibration):
                raise CalibrationError(f"calibration layer {i}: expected a LayerCalibration, got {_desc(lay)}")
            if (lay.num_kv_heads, lay.head_dim) != (first.num_kv_heads, first.head_dim):
                raise CalibrationError(
                    f"calibration layer {i}: shape {tuple(lay.key_offset.shape)} differs from layer 0's "
                    f"{tuple(first.key_offset.shape)}"
                )
        _check_meta(self.meta)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def layer(self, index: int) -> LayerCalibration:
        if not 0 <= index < len(self.layers):
            raise CalibrationError(f"calibration: has layers 0..{len(self.layers) - 1}, asked for {index}")
        return self.layers[index]

    @classmethod
    def identity(cls, num_layers: int, num_kv_heads: int, head_dim: int) -> Calibration:
        """:meth:`LayerCalibration.identity` in each of ``num_layers`` layers."""
        if not (isinstance(num_layers, int) and not isinstance(num_layers, bool) and num_layers >= 1):
            raise ShapeError(f"identity calibration: num_layers={num_layers!r}")
        layers = tuple(LayerCalibration.identity(num_kv_heads, head_dim) for _ in range(num_layers))
        return cls(layers, {"text": f"{NO_CALIBRATION}: offsets 0, gains 1"})

    def check_model(self, num_layers: int, num_kv_heads: int, head_dim: int) -> None:
        """Raise :class:`CalibrationError` unless this calibration fits the model's shape."""
        lay = self.layers[0]
        have = (self.num_layers, lay.num_kv_heads, lay.head_dim)
        if have != (num_layers, num_kv_heads, head_dim):
            raise CalibrationError(
                f"calibration: made for {have[0]} layers x {have[1]} kv heads x head_dim {have[2]} "
                f"({self.meta.get('model', 'unknown model')}), the model has {num_layers} x {num_kv_heads} x {head_dim}"
            )

    def state_bytes(self) -> int:
        """Bytes a server keeps for this calibration: six fp16 vectors per layer and kv head."""
        lay = self.layers[0]
        return self.num_layers * state_bytes_per_layer(lay.num_kv_heads, lay.head_dim)

    def to(self, device: torch.device | str) -> Calibration:
        return Calibration(tuple(lay.to(device) for lay in self.layers), self.meta)

    def save(self, path: str | Path) -> None:
        """Write to ``path`` (torch's format, tensors and plain values only: :meth:`load`
        reads it with ``weights_only=True``). A calibration changed after construction (its
        meta, its tensors in place) so that :meth:`load` would refuse the file raises
        :class:`CalibrationError` naming the file, and nothing is written."""
        p = Path(path)
        try:
            self._check_again()
        except CalibrationError as exc:
            raise CalibrationError(f"calibration {str(p)!r}: not written: {exc}") from None
        data = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "meta": dict(self.meta),
            "layers": [
                {f.name: lay.values_of(f.name).to("cpu", torch.float16) for f in fields(lay)} for lay in self.layers
            ],
        }
        torch.save(data, p)

    def _check_again(self) -> None:
        """The constructors' checks, run again on what this calibration holds now."""
        Calibration(self.layers, self.meta)
        for i, lay in enumerate(self.layers):
            try:
                lay.check_tensors()
                lay.check_values()
            except CalibrationError as exc:
                raise CalibrationError(f"layer {i} {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a file written by :meth:`save` (``tq calibrate --out``). Every file it cannot
        use raises :class:`CalibrationError` naming the file."""
        p = Path(path)
        try:
            data = torch.load(p, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise CalibrationError(f"calibration {str(p)!r} does not exist (tq calibrate --out makes one)") from None
        except Exception as exc:
            raise CalibrationError(f"calibration {str(p)!r} is not a tq calibration file: {exc}") from None
        try:
            return cls._from_file_data(data)
        except CalibrationError as exc:
            raise CalibrationError(f"calibration {str(p)!r}: {exc}") from None

    @classmethod
    def _from_file_data(cls, data: object) -> Calibration:
        if not isinstance(data, dict) or not isinstance(data.get("format"), str) or data["format"] != FILE_FORMAT:
            raise CalibrationError("is not a tq calibration file")
        version = data.get("version")
        if type(version) is not int or version != FILE_VERSION:
            raise CalibrationError(f"file version {version!r}, this tq-core reads {FILE_VERSION}")
        layers = data.get("layers")
        if not isinstance(layers, list | tuple):
            raise CalibrationError(f"layers: expected a list of layers, got {type(layers).__name__}")
        if not layers:
            raise CalibrationError("holds no layers")
        out = []
        for i, lay in enumerate(layers):
            if not isinstance(lay, dict) or set(lay) != set(_FIELDS):
                raise CalibrationError(f"layer {i} does not hold {list(_FIELDS)}")
            try:
                out.append(LayerCalibration(**{n: _float32(lay[n], n) for n in _FIELDS}))
            except CalibrationError as exc:
                raise CalibrationError(f"layer {i} {exc}") from None
        return cls(tuple(out), data.get("meta", {}))


def _float32(t: object, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise CalibrationError(f"{what}: expected a float tensor, got {_desc(t)}")
    return t.float()


# how deep and how large a calibration's meta may be (a file's meta can even be a cycle)
_META_DEPTH = 16
_META_VALUES = 100_000
_PLAIN = (str, int, float, bool, type(None))


def _check_meta(meta: object) -> None:
    """Raise :class:`CalibrationError` unless ``meta`` is what a calibration file holds and
    :meth:`Calibration.load` reads back: a mapping of str keys to plain values (None, bool,
    int, float, str, and lists, tuples and dicts with str keys of them; exactly these types,
    not subclasses), nested at most ``_META_DEPTH`` deep, ``_META_VALUES`` values in all."""
    if not isinstance(meta, Mapping):
        raise CalibrationError(f"meta: expected a mapping of str keys to plain values, got {type(meta).__name__}")
    todo: list[tuple[str, object, int]] = [("meta", meta, 0)]
    count = 0
    while todo:
        where, x, depth = todo.pop()
        count += 1
        if depth > _META_DEPTH or count > _META_VALUES:
            raise CalibrationError(f"meta: nested deeper than {_META_DEPTH} or more than {_META_VALUES} values")
        kind = type(x)
        if kind in _PLAIN:
            continue
        if isinstance(x, list | tuple) and kind in (list, tuple):
            todo.extend((f"{where}[{i}]", y, depth + 1) for i, y in enumerate(x))
        elif isinstance(x, Mapping) and (kind is dict or x is meta):
            for k, y in x.items():
                if type(k) is not str:
                    raise CalibrationError(f"{where}: key {reprlib.repr(k)} is not a str")
                todo.append((f"{where}[{reprlib.repr(k)}]", y, depth + 1))
        else:
            raise CalibrationError(
                f"{where}: {type(x).__name__} is not a plain value (None, bool, int, float, str, "
                "or a list, tuple or dict of them)"
            )


def state_bytes_per_layer(num_kv_heads: int, head_dim: int) -> int:
    """A calibrated layer's state: six fp16 vectors of ``head_dim`` per kv head."""
    return 6 * 2 * num_kv_heads * head_dim


def _fp16(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to fp16 and back to float32 (finite: saturated at fp16's range)."""
    return t.clamp(-65504.0, 65504.0).to(torch.float16).float()


def _gain(signal: torch.Tensor, spread: torch.Tensor) -> torch.Tensor:
    """``(signal / spread) ** (1/4)`` per channel (both ``[H, d]``, regularised), scaled so
    that ``sum(gain^2 * spread) == sum(spread)`` per head."""
    sig = signal + _REG * signal.mean(-1, keepdim=True) + 1e-30
    spr = spread + _REG * spread.mean(-1, keepdim=True) + 1e-30
    g = (sig / spr).sqrt().sqrt()
    return g * ((spr.sum(-1, keepdim=True) / (g * g * spr).sum(-1, keepdim=True)).sqrt())


class _LayerSums:
    def __init__(self, hk: int, d: int) -> None:
        z = torch.zeros(hk, d, dtype=torch.float64)
        self.n = self.n0 = self.nq = 0
        self.k, self.kk, self.k0, self.kk0 = z.clone(), z.clone(), z.clone(), z.clone()
        self.v, self.vv, self.v0, self.vv0 = z.clone(), z.clone(), z.clone(), z.clone()
        self.qq = z.clone()

    def moments(self) -> dict[str, torch.Tensor]:
        """Per channel ``[H, d]``: mean and second moment of keys and values past / at position
        0 (``k``, ``kk``, ``k0``, ``kk0``, ``v``, ...), and the queries' second moment ``qq``."""
        n, n0 = max(self.n, 1), max(self.n0, 1)
        return {
            "k": self.k / n, "kk": self.kk / n, "k0": self.k0 / n0, "kk0": self.kk0 / n0,
            "v": self.v / n, "vv": self.vv / n, "v0": self.v0 / n0, "vv0": self.vv0 / n0,
            "qq": self.qq / max(self.nq, 1),
        }  # fmt: skip


class CalibrationStats:
    """Sums of one model's keys, values and queries, layer by layer, and the calibration
    they give (:meth:`finish`).

    :meth:`add` takes one forward pass's ``query [B, Hq, T, d]``, ``key`` and ``value``
    ``[B, Hk, T, d]`` of a layer (keys after RoPE), for rows that start at position 0;
    :meth:`add_first` only their position 0 (more samples of the attention sink's offsets
    from short rows, which cost a forward pass of one token each).
    """

    def __init__(self) -> None:
        self._sums: dict[int, _LayerSums] = {}
        self.tokens = 0

    def add(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        b, hk, t, d = key.shape
        hq = query.shape[1]
        if query.shape[0] != b or query.shape[2:] != (t, d) or hq % hk or value.shape != key.shape:
            raise ShapeError(
                f"calibration: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)} "
                "do not form [B, Hq, T, d] / [B, Hk, T, d]"
            )
        s = self._sums.setdefault(layer, _LayerSums(hk, d))
        k, v = key.double(), value.double()  # reduced where they are, summed on the CPU
        rest_k, rest_v = k[:, :, 1:], v[:, :, 1:]
        q = query.double().reshape(b, hk, hq // hk, t, d)
        for name, part in (
            ("k", rest_k.sum((0, 2))),
            ("kk", rest_k.square().sum((0, 2))),
            ("v", rest_v.sum((0, 2))),
            ("vv", rest_v.square().sum((0, 2))),
            ("qq", q.square().sum((0, 2, 3))),
        ):
            getattr(s, name).add_(part.cpu())
        s.n += b * (t - 1)
        s.nq += b * (hq // hk) * t
        self._add_first(s, k[:, :, 0], v[:, :, 0])
        if layer == 0:
            self.tokens += b * t

    def add_first(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Position 0 of ``key`` and ``value`` ``[B, Hk, T, d]`` (rows that start at position 0),
        counted in the position-0 offsets only."""
        if key.dim() != 4 or value.shape != key.shape or key.shape[2] < 1:
            raise ShapeError(
                f"calibration: key {tuple(key.shape)}, value {tuple(value.shape)} do not form [B, Hk, T, d]"
            )
        s = self._sums.setdefault(layer, _LayerSums(key.shape[1], key.shape[3]))
        self._add_first(s, key[:, :, 0].double(), value[:, :, 0].double())

    @staticmethod
    def _add_first(s: _LayerSums, k0: torch.Tensor, v0: torch.Tensor) -> None:
        for name, part in (
            ("k0", k0.sum(0)),
            ("kk0", k0.square().sum(0)),
            ("v0", v0.sum(0)),
            ("vv0", v0.square().sum(0)),
        ):
            getattr(s, name).add_(part.cpu())
        s.n0 += k0.shape[0]

    def layers(self) -> list[int]:
        """The layers seen, in order."""
        return sorted(self._sums)

    def moments(self, layer: int) -> dict[str, torch.Tensor]:
        """Layer ``layer``'s per-channel moments (see ``_LayerSums.moments``)."""
        if layer not in self._sums:
            raise CalibrationError(f"calibration: no statistics for layer {layer}")
        return self._sums[layer].moments()

    def finish(
        self,
        num_layers: int,
        output_weights: Sequence[torch.Tensor | None] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Calibration:
        """The calibration of layers ``0..num_layers-1``. ``output_weights[i]``: layer ``i``'s
        output projection ``[hidden, Hq * d]`` (None: value gains of 1)."""
        missing = [i for i in range(num_layers) if i not in self._sums or self._sums[i].n < 1]
        if missing:
            raise CalibrationError(f"calibration: no tokens past position 0 seen for layers {missing}")
        layers = []
        for i in range(num_layers):
            s = self._sums[i]
            hk, d = s.k.shape
            mu, nu = s.k / s.n, s.v / s.n
            k_var = (s.kk / s.n - mu * mu).clamp(min=0)
            v_var = (s.vv / s.n - nu * nu).clamp(min=0)
            key_gain = _gain(s.qq / s.nq, k_var)
            w = None if output_weights is None else output_weights[i]
            if w is None:
                value_gain = torch.ones(hk, d, dtype=torch.float64)
            else:
                value_gain = _gain(_value_signal(w, hk, d, i), v_var)
            layers.append(
                LayerCalibration(
                    key_offset=_fp16(mu),
                    key_first_offset=_fp16(s.k0 / s.n0),
                    key_gain=_fp16(key_gain),
                    value_offset=_fp16(nu),
                    value_first_offset=_fp16(s.v0 / s.n0),
                    value_gain=_fp16(value_gain),
                )
            )
        info = {"tokens": self.tokens, **(meta or {})}
        return Calibration(tuple(layers), info)


def _value_signal(w: torch.Tensor, hk: int, d: int, layer: int) -> torch.Tensor:
    """``[H, d]``: the squared column norms of a layer's output projection ``w [hidden, Hq * d]``,
    summed over the query heads that read each kv head's values."""
    w = w.detach().cpu()
    if w.dim() != 2 or w.shape[1] % (hk * d):
        raise ShapeError(f"output_weights[{layer}]: shape {tuple(w.shape)}, expected [hidden, Hq * {d}]")
    return w.double().square().sum(0).view(hk, -1, d).sum(1)


# the four parts of a held-out report: keys and values past position 0, and at position 0
HELD_OUT_PARTS = ("key", "key_first", "value", "value_first")
_PART_NAMES = ("keys", "keys at position 0", "values", "values at position 0")


def expected_score_error(
    calibration: Calibration,
    stats: CalibrationStats,
    output_weights: Sequence[torch.Tensor | None] | None = None,
) -> dict[str, torch.Tensor]:
    """Per part of :data:`HELD_OUT_PARTS`, ``[num_layers, num_kv_heads]``: the error a code
    whose error is spread evenly over the coded vector's channels, at a fixed relative error,
    puts into what attention computes, when the text of ``stats`` is coded with
    ``calibration``, up to that relative error's factor (module docstring):

    - keys: ``E||a * (k - mu)||^2 * sum_c E[q_c^2] / a_c^2``, the expected squared error of
      a score ``q . k``;
    - values: ``E||b * (v - nu)||^2 * sum_c g_c / b_c^2``, with ``g`` the output projection's
      squared column norms of the heads that read the value (``output_weights[i]``; None or
      missing: ``g = 1``), the expected squared error of the layer's output;

    with the offsets and moments at position 0 for the ``*_first`` parts (the same gains).
    Each is at least its minimum over offsets and gains, ``(sum_c sqrt(E[q_c^2] Var[k_c]))^2``
    (Cauchy-Schwarz), reached by the mean and ``a_c = (E[q_c^2] / Var[k_c]) ** (1/4)``."""
    layers = stats.layers()
    if layers != list(range(calibration.num_layers)):
        raise CalibrationError(
            f"held-out statistics hold layers {layers}, the calibration has {calibration.num_layers}"
        )
    out: dict[str, list[torch.Tensor]] = {name: [] for name in HELD_OUT_PARTS}
    for i, lay in enumerate(calibration.layers):
        m = stats.moments(i)
        if m["k"].shape != lay.key_offset.shape:
            raise ShapeError(
                f"held-out statistics of layer {i}: shape {tuple(m['k'].shape)}, "
                f"the calibration's {tuple(lay.key_offset.shape)}"
            )
        hk, d = lay.key_offset.shape
        w = None if output_weights is None or i >= len(output_weights) else output_weights[i]
        g = torch.ones(hk, d, dtype=torch.float64) if w is None else _value_signal(w, hk, d, i)
        cal = {f: lay.values_of(f).detach().cpu().double() for f in _FIELDS}
        for name, kind, x, xx, offset in (
            ("key", "key", m["k"], m["kk"], cal["key_offset"]),
            ("key_first", "key", m["k0"], m["kk0"], cal["key_first_offset"]),
            ("value", "value", m["v"], m["vv"], cal["value_offset"]),
            ("value_first", "value", m["v0"], m["vv0"], cal["value_first_offset"]),
        ):
            gain2 = cal[f"{kind}_gain"].square()
            signal = m["qq"] if kind == "key" else g
            energy = (gain2 * (xx - 2 * x * offset + offset * offset)).sum(-1)
            out[name].append(energy * (signal / gain2).sum(-1))
    return {name: torch.stack(v) for name, v in out.items()}


@dataclass(frozen=True)
class HeldOutReport:
    """How a calibration carries to a held-out text: per part of :data:`HELD_OUT_PARTS`, per
    layer, :func:`expected_score_error` on the held-out text with the calibration, over the
    same with the held-out text's own calibration (``ratio``, 1 = as good as calibrating on
    that text), and without any calibration (``uncalibrated``: no offsets, gains of 1, as
    vLLM's formats code), summed over kv heads. ``tokens``: the held-out tokens seen."""

    ratio: Mapping[str, tuple[float, ...]]
    uncalibrated: Mapping[str, tuple[float, ...]]
    tokens: int

    def mean(self, part: str, of: str = "ratio") -> float:
        values = getattr(self, of)[part]
        return sum(values) / len(values)

    def worst(self, part: str) -> tuple[int, float]:
        """``(layer, ratio)`` of the layer whose ratio is largest."""
        values = self.ratio[part]
        i = max(range(len(values)), key=values.__getitem__)
        return i, values[i]

    def lines(self) -> list[str]:
        """The report as printed by ``tq calibrate --held-out``."""
        out = []
        for part, what in zip(HELD_OUT_PARTS, _PART_NAMES, strict=True):
            layer, worst = self.worst(part)
            out.append(
                f"  {what:21} {self.mean(part):6.3f}x of its own calibration's (worst layer {layer}: {worst:.3f}x); "
                f"uncalibrated {self.mean(part, 'uncalibrated'):.2f}x"
            )
        return out


def held_out_report(
    calibration: Calibration,
    held_out: CalibrationStats,
    output_weights: Sequence[torch.Tensor | None] | None = None,
) -> HeldOutReport:
    """Compare ``calibration`` on the held-out text of ``held_out`` with that text's own
    calibration and with none (:class:`HeldOutReport`)."""
    own = held_out.finish(calibration.num_layers, output_weights)
    first = calibration.layers[0]
    zero = torch.zeros(first.num_kv_heads, first.head_dim)
    one = torch.ones_like(zero)
    none = Calibration(tuple(LayerCalibration(zero, zero, one, zero, zero, one) for _ in calibration.layers))
    mine, theirs, plain = (
        {k: v.sum(-1) for k, v in expected_score_error(c, held_out, output_weights).items()}
        for c in (calibration, own, none)
    )
    return HeldOutReport(
        ratio={k: tuple((mine[k] / theirs[k]).tolist()) for k in HELD_OUT_PARTS},
        uncalibrated={k: tuple((plain[k] / theirs[k]).tolist()) for k in HELD_OUT_PARTS},
        tokens=held_out.tokens,
    )


def amortised_bytes(slot_bytes: float, state_bytes_per_head: float, tokens: int) -> float:
    """Bytes per token and kv head: the slot plus calibration state (bytes per kv head)
    shared over ``tokens`` tokens."""
    return slot_bytes + state_bytes_per_head / tokens if tokens > 0 else math.inf


__all__ = [
    "HELD_OUT_PARTS",
    "NO_CALIBRATION",
    "Calibration",
    "CalibrationStats",
    "HeldOutReport",
    "LayerCalibration",
    "amortised_bytes",
    "expected_score_error",
    "held_out_report",
    "state_bytes_per_layer",
]
