"""Exceptions raised by every tq package.

All argument errors derive from both :class:`TQError` and :class:`ValueError`, so callers
can catch either the project-wide base or the builtin they already expect.
"""

from __future__ import annotations


class TQError(Exception):
    """Base class of every error raised by tq."""


class PresetError(TQError, ValueError):
    """Unknown preset name or a head_dim the preset does not support."""


class ShapeError(TQError, ValueError):
    """A tensor has the wrong rank or size."""


class DtypeError(TQError, ValueError):
    """A tensor has the wrong dtype."""


class DeviceError(TQError, ValueError):
    """Tensors are on different devices, or on a device the implementation cannot use."""


class LayoutError(TQError, ValueError):
    """A cache tensor's memory layout cannot hold tq's paged arrangement."""


class RangeError(TQError, ValueError):
    """A value out of its range: metadata pointing outside the cache (slot, block id,
    sequence or query length) or an attention scale that is not positive and finite in
    float32."""


class BackendUnavailableError(TQError, RuntimeError):
    """An implementation (Triton, SYCL, vLLM) is not usable in this environment."""


class CalibrationError(TQError, ValueError):
    """A calibration that cannot be used: a missing or malformed file, or one made for
    another model shape (calibrated formats, :class:`tq_core.Calibration`)."""


class TuningError(TQError, ValueError):
    """A tuning table or a kernel configuration that cannot be used (tq-triton, tq-sycl)."""


__all__ = [
    "BackendUnavailableError",
    "CalibrationError",
    "DeviceError",
    "DtypeError",
    "LayoutError",
    "PresetError",
    "RangeError",
    "ShapeError",
    "TQError",
    "TuningError",
]
