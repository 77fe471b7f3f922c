"""tq-core: the TurboQuant KV-cache codec and readable torch reference ops.

The same API exists in every tq package (``tq_triton``, ``tq_sycl``); this one is the
reference and the CPU implementation. :mod:`tq_core.contract` is what backends build on
(argument checks, kernel fields, the backend registry); :mod:`tq_core.testing` is the
test and benchmark kit every package shares.
"""

from .__about__ import __version__
from .attention import attention
from .bitpack import pack_codes, unpack_codes
from .calibration import NO_CALIBRATION, Calibration, CalibrationStats, LayerCalibration
from .codebooks import Codebook, distortion, get_codebook, lloyd_max
from .codec import decode_fields, encode_fields, key_codebook, rotate, value_codebook
from .errors import (
    BackendUnavailableError,
    CalibrationError,
    DeviceError,
    DtypeError,
    LayoutError,
    PresetError,
    RangeError,
    ShapeError,
    TQError,
    TuningError,
)
from .hadamard import fwht, hadamard_matrix, ifwht, random_signs
from .kv import decode_kv, encode_kv
from .layout import BlockLayout, KernelFields, SlotLayout
from .paged import block_fields, from_vllm_cache, gather_kv, store, to_vllm_cache
from .presets import CALIBRATED_PRESETS, PRESETS, SUPPORTED_HEAD_DIMS, Preset, get_preset

__all__ = [
    "CALIBRATED_PRESETS",
    "NO_CALIBRATION",
    "PRESETS",
    "SUPPORTED_HEAD_DIMS",
    "BackendUnavailableError",
    "BlockLayout",
    "Calibration",
    "CalibrationError",
    "CalibrationStats",
    "Codebook",
    "DeviceError",
    "DtypeError",
    "KernelFields",
    "LayerCalibration",
    "LayoutError",
    "Preset",
    "PresetError",
    "RangeError",
    "ShapeError",
    "SlotLayout",
    "TQError",
    "TuningError",
    "__version__",
    "attention",
    "block_fields",
    "decode_fields",
    "decode_kv",
    "distortion",
    "encode_fields",
    "encode_kv",
    "from_vllm_cache",
    "fwht",
    "gather_kv",
    "get_codebook",
    "get_preset",
    "hadamard_matrix",
    "ifwht",
    "key_codebook",
    "lloyd_max",
    "pack_codes",
    "random_signs",
    "rotate",
    "store",
    "to_vllm_cache",
    "unpack_codes",
    "value_codebook",
]
