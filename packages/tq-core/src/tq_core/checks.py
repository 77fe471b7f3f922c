"""Argument validation shared by every implementation of the tq API.

Shape, dtype and device checks are cheap and always run. Checks of metadata *values*
(slot ranges, block ids, lengths) read device memory; the reference ops always run
them, fast implementations run them when ``TQ_DEBUG=1`` so the hot path never
synchronises with the host.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from .calibration import LayerCalibration
from .env import env_flag
from .errors import DeviceError, DtypeError, LayoutError, PresetError, RangeError, ShapeError
from .layout import BlockLayout, KernelFields
from .presets import SUPPORTED_HEAD_DIMS, Preset, get_preset

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)
# every backend computes in float32: a scale must be a positive number float32 holds
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
FLOAT32_TINY = float(torch.finfo(torch.float32).smallest_normal) * 2.0**-23  # the smallest subnormal


def debug_enabled() -> bool:
    """``TQ_DEBUG``: fast implementations run the metadata value checks too (they synchronise)."""
    return env_flag("TQ_DEBUG")


def check_tensor(
    t: object,
    name: str,
    *,
    ndim: int | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ShapeError(f"{name}: expected {ndim} dims, got shape {tuple(t.shape)}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise DtypeError(f"{name}: expected dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if device is not None and t.device != device:
        raise DeviceError(f"{name}: is on {t.device}, expected {device} (all tensors on one device)")
    return t


def check_has_storage(t: torch.Tensor, name: str) -> None:
    """Raise :class:`DeviceError` for a meta tensor (a shape without data): no op can read it."""
    if t.device.type == "meta":
        raise DeviceError(f"{name}: is a meta tensor (a shape without data); expected a tensor on a real device")


def check_scale(scale: object) -> float:
    """``scale`` as a float: a positive number, finite and non-zero in float32, where every
    backend multiplies by it (``1e300`` would be inf there, ``1e-50`` zero). Raises
    :class:`RangeError` naming it otherwise."""
    if (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
        or not FLOAT32_TINY <= scale <= FLOAT32_MAX
    ):
        raise RangeError(
            f"scale={scale!r}: expected a finite positive float within float32's range "
            f"({FLOAT32_TINY:.3g} to {FLOAT32_MAX:.4g})"
        )
    return float(scale)


def block_is_contiguous(kv: torch.Tensor) -> bool:
    """Whether dims 1..3 of ``kv`` cover one dense byte range per block, slot bytes innermost."""
    if kv.stride(3) != 1 and kv.shape[3] > 1:
        return False
    dims = sorted((kv.stride(i), kv.shape[i]) for i in (1, 2) if kv.shape[i] > 1)
    expected = kv.shape[3]
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def head_dim_for_slot(preset: Preset, slot_size_aligned: int) -> int:
    """The head_dim whose vLLM slot is ``slot_size_aligned`` bytes for ``preset``."""
    for d in SUPPORTED_HEAD_DIMS:
        if preset.layout(d).slot_size_aligned == slot_size_aligned:
            return d
    sizes = {d: preset.layout(d).slot_size_aligned for d in SUPPORTED_HEAD_DIMS}
    raise ShapeError(
        f"kv_cache: last dim {slot_size_aligned} is no {preset.name} slot size; "
        f"expected one of {sizes} (head_dim: bytes)"
    )


def check_cache(
    kv_cache: object,
    preset: Preset,
    head_dim: int | None = None,
    num_kv_heads: int | None = None,
    device: torch.device | None = None,
) -> BlockLayout:
    """Validate a paged cache tensor and return its :class:`BlockLayout`."""
    kv = check_tensor(kv_cache, "kv_cache", ndim=4, dtypes=(torch.uint8,), device=device)
    check_has_storage(kv, "kv_cache")
    nb, bs, h, s = kv.shape
    if h < 1:
        raise ShapeError(f"kv_cache: has {h} kv heads (dim 2), expected at least 1")
    if head_dim is None:
        head_dim = head_dim_for_slot(preset, s)
    expected = preset.layout(head_dim).slot_size_aligned
    if s != expected:
        raise ShapeError(
            f"kv_cache: last dim is {s}, expected slot_size_aligned={expected} for {preset.name} at head_dim={head_dim}"
        )
    if num_kv_heads is not None and h != num_kv_heads:
        raise ShapeError(f"kv_cache: has {h} kv heads (dim 2), expected {num_kv_heads} from key/query")
    if nb < 1:
        raise ShapeError("kv_cache: has no blocks")
    if not block_is_contiguous(kv):
        raise LayoutError(
            f"kv_cache: strides {kv.stride()} for shape {tuple(kv.shape)} — each block's "
            "block_size * num_kv_heads * slot bytes must form one contiguous range with the slot dim innermost "
            "(the block stride is free; vLLM's [num_blocks, block_size, heads, slot] and its transposed "
            "head-major view both qualify)"
        )
    lay = preset.block_layout(head_dim, bs, h)
    if nb > 1 and kv.stride(0) < lay.block_bytes:
        raise LayoutError(
            f"kv_cache: block stride {kv.stride(0)} is smaller than a block's {lay.block_bytes} bytes, "
            "so blocks would overlap (an expanded or aliased view?)"
        )
    return lay


def _check_floating_pair(key: torch.Tensor, value: torch.Tensor) -> None:
    check_tensor(key, "key", ndim=3, dtypes=FLOAT_DTYPES)
    check_tensor(value, "value", ndim=3, dtypes=FLOAT_DTYPES, device=key.device)
    if key.shape != value.shape:
        raise ShapeError(f"value: shape {tuple(value.shape)} differs from key's {tuple(key.shape)}")


def check_encode_args(key: object, value: object, preset: str | Preset) -> Preset:
    p = get_preset(preset)
    _check_floating_pair(key, value)  # type: ignore[arg-type]
    check_has_storage(key, "key")  # type: ignore[arg-type]
    p.check_head_dim(key.shape[-1], "key.shape[-1] (head_dim)")  # type: ignore[union-attr]
    return p


@dataclass(frozen=True)
class StoreArgs:
    """What :func:`check_store_args` found: the preset, the cache's layout and its field offsets."""

    preset: Preset
    layout: BlockLayout
    fields: KernelFields
    num_slots: int
    positions: torch.Tensor | None = None  # calibrated presets: each token's position (checked)


def check_calibration(
    preset: Preset, calibration: object, num_kv_heads: int, head_dim: int, device: torch.device
) -> LayerCalibration | None:
    """A calibrated preset needs its layer's :class:`LayerCalibration` (fitting the cache's
    heads, head_dim and device); any other preset takes none."""
    if not preset.calibrated:
        if calibration is not None:
            raise PresetError(f"calibration: {preset.name} is not a calibrated format and takes none")
        return None
    if calibration is None:
        raise PresetError(
            f"{preset.name} is a calibrated format: pass calibration= (the layer's tq_core.LayerCalibration, "
            "from a Calibration that tq calibrate makes)"
        )
    if not isinstance(calibration, LayerCalibration):
        raise PresetError(f"calibration: expected a tq_core.LayerCalibration, got {type(calibration).__name__}")
    calibration.check(num_kv_heads, head_dim, device)
    return calibration


def check_calibrated_tokens(
    preset: Preset,
    calibration: object,
    positions: object,
    num_tokens: int,
    num_kv_heads: int,
    head_dim: int,
    device: torch.device,
    check_values: bool = True,
) -> torch.Tensor | None:
    """The checks of a call that codes or decodes tokens of a calibrated preset: its layer's
    calibration (:func:`check_calibration`) and each token's position in its sequence
    (``positions`` ``[num_tokens]``, non-negative). Returns the positions, or None for any
    other preset. No device work unless ``check_values``: a kernel reads the positions
    itself, the reference ops compare them with 0."""
    if check_calibration(preset, calibration, num_kv_heads, head_dim, device) is None:
        return None
    if positions is None:
        raise PresetError(
            f"{preset.name} is a calibrated format: pass positions= (each token's position in its sequence)"
        )
    pos = check_tensor(positions, "positions", ndim=1, dtypes=INDEX_DTYPES, device=device)
    if pos.shape[0] != num_tokens:
        raise ShapeError(f"positions: has {pos.shape[0]} entries, expected num_tokens={num_tokens}")
    if check_values and num_tokens and int(pos.min()) < 0:
        raise RangeError("positions: a position is negative")
    return pos


def check_store_args(
    key: object,
    value: object,
    kv_cache: object,
    slot_mapping: object,
    preset: str | Preset,
    check_values: bool = True,
    calibration: object = None,
    positions: object = None,
) -> StoreArgs:
    p = check_encode_args(key, value, preset)
    assert isinstance(key, torch.Tensor)
    n, h, d = key.shape
    lay = check_cache(kv_cache, p, d, h, device=key.device)
    sm = check_tensor(slot_mapping, "slot_mapping", ndim=1, dtypes=INDEX_DTYPES, device=key.device)
    if sm.shape[0] != n:
        raise ShapeError(f"slot_mapping: has {sm.shape[0]} entries, expected num_tokens={n} (key.shape[0])")
    pos = check_calibrated_tokens(p, calibration, positions, n, h, d, key.device, check_values)
    assert isinstance(kv_cache, torch.Tensor)
    num_slots = kv_cache.shape[0] * kv_cache.shape[1]
    if check_values and n:
        hi = int(sm.max())
        if hi >= num_slots:
            raise RangeError(f"slot_mapping: slot {hi} is past the cache's {num_slots} slots (num_blocks*block_size)")
        valid = sm[sm >= 0]
        if valid.numel() != torch.unique(valid).numel():
            raise RangeError("slot_mapping: the same slot appears twice in one call")
    return StoreArgs(p, lay, p.kernel_fields(lay), num_slots, pos)


@dataclass(frozen=True)
class AttentionArgs:
    """What :func:`check_attention_args` found: preset, layout, field offsets and sizes."""

    preset: Preset
    layout: BlockLayout
    fields: KernelFields
    num_reqs: int
    head_dim: int
    num_q_heads: int
    num_kv_heads: int


def check_attention_args(
    query: object,
    kv_cache: object,
    block_table: object,
    seq_lens: object,
    query_start_loc: object,
    preset: str | Preset,
    scale: object,
    out: object = None,
    check_values: bool = True,
    max_q_len: int | None = None,
    calibration: object = None,
) -> AttentionArgs:
    p = get_preset(preset)
    q = check_tensor(query, "query", ndim=3, dtypes=FLOAT_DTYPES)
    dev = q.device
    check_has_storage(q, "query")
    nq, hq, d = q.shape
    p.check_head_dim(d, "query.shape[-1] (head_dim)")
    kv = check_tensor(kv_cache, "kv_cache", ndim=4, dtypes=(torch.uint8,), device=dev)
    hk = kv.shape[2]
    lay = check_cache(kv, p, d, hk, device=dev)  # first: it rejects a cache of 0 kv heads
    if hq % hk:
        raise ShapeError(f"query: {hq} heads is not a multiple of kv_cache's {hk} kv heads (GQA)")
    bt = check_tensor(block_table, "block_table", ndim=2, dtypes=INDEX_DTYPES, device=dev)
    sl = check_tensor(seq_lens, "seq_lens", ndim=1, dtypes=INDEX_DTYPES, device=dev)
    qsl = check_tensor(query_start_loc, "query_start_loc", ndim=1, dtypes=INDEX_DTYPES, device=dev)
    r = sl.shape[0]
    if bt.shape[0] < r:
        raise ShapeError(f"block_table: has {bt.shape[0]} rows, expected >= num_reqs={r} (len(seq_lens))")
    if qsl.shape[0] != r + 1:
        raise ShapeError(f"query_start_loc: has {qsl.shape[0]} entries, expected num_reqs + 1 = {r + 1}")
    check_scale(scale)
    if max_q_len is not None and (not _is_int(max_q_len) or max_q_len < 1):
        raise RangeError(f"max_q_len={max_q_len!r}: expected None or a positive int")
    if out is not None:
        o = check_tensor(out, "out", ndim=3, dtypes=FLOAT_DTYPES, device=dev)
        if o.shape != q.shape:
            raise ShapeError(f"out: shape {tuple(o.shape)}, expected the query's {tuple(q.shape)}")
        check_out_layout(o)
    check_calibration(p, calibration, hk, d, dev)
    if check_values and r:
        _check_attention_values(nq, kv, bt, sl, qsl, r, max_q_len)
    return AttentionArgs(p, lay, p.kernel_fields(lay), r, d, hq, hk)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_out_layout(out: torch.Tensor, name: str = "out") -> None:
    """Raise :class:`LayoutError` for an output tensor kernels cannot write row by row.

    Its last dim must have stride 1 (kernels write whole head vectors), and no dim of
    size > 1 may have stride 0 (an expanded view: every row would land on the same
    bytes, and kernels that derive row addresses from the shape would write past the
    storage). Other strides (row or head slices of a larger buffer) are accepted.
    """
    if out.shape[-1] > 1 and out.stride(-1) != 1:
        raise LayoutError(
            f"{name}: last-dim stride {out.stride(-1)} for shape {tuple(out.shape)}, expected 1 "
            "(each head's values contiguous; pass out.contiguous() and copy back)"
        )
    zero = [i for i in range(out.dim()) if out.shape[i] > 1 and out.stride(i) == 0]
    if zero:
        raise LayoutError(
            f"{name}: stride 0 in dim {zero[0]} (strides {out.stride()}, shape {tuple(out.shape)}): "
            "an expanded view cannot be written; expected a tensor with its own memory per row"
        )


def _host_ints(t: object, name: str) -> np.ndarray:
    """A CPU index tensor as an int64 numpy array, without a copy where it is already int64."""
    check_tensor(t, name, ndim=1, dtypes=INDEX_DTYPES)
    assert isinstance(t, torch.Tensor)
    if t.device.type != "cpu":
        raise DeviceError(
            f"{name}: is on {t.device}, expected a CPU tensor (the host-side check never reads device memory)"
        )
    return t.detach().numpy().astype(np.int64, copy=False)


def check_host_metadata(
    seq_lens_cpu: object,
    query_start_loc_cpu: object,
    num_query_rows: int,
    block_table_width: int,
    block_size: int,
    max_q_len: int | None = None,
) -> None:
    """Check host copies of one batch's attention metadata; no device memory is read.

    ``seq_lens_cpu`` ``[num_reqs]`` and ``query_start_loc_cpu`` ``[num_reqs + 1]`` are CPU
    index tensors holding the same values as the device tensors passed to ``attention``
    (vLLM keeps such copies; an upper bound of each sequence length also qualifies). Raises
    :class:`RangeError` unless ``query_start_loc`` starts at 0, never decreases and ends
    within ``num_query_rows``, every ``seq_lens`` entry is in ``[q_len, block_table_width *
    block_size]``, and (with ``max_q_len``) no q_len exceeds it; :class:`DeviceError` for a
    tensor that is not on the CPU. It costs a few microseconds of numpy on the host and
    never synchronises with a device. Block ids are not checked: they live only in device
    memory (``TQ_DEBUG=1`` checks them, see :func:`check_attention_args`).
    """
    sl = _host_ints(seq_lens_cpu, "seq_lens")
    qsl = _host_ints(query_start_loc_cpu, "query_start_loc")
    if qsl.shape[0] != sl.shape[0] + 1:
        raise ShapeError(f"query_start_loc: has {qsl.shape[0]} entries, expected num_reqs + 1 = {sl.shape[0] + 1}")
    for arg, v in (("num_query_rows", num_query_rows), ("block_table_width", block_table_width)):
        if not _is_int(v) or v < 0:
            raise RangeError(f"{arg}={v!r}: expected a non-negative int")
    if not _is_int(block_size) or block_size < 1:
        raise RangeError(f"block_size={block_size!r}: expected a positive int")
    if max_q_len is not None and (not _is_int(max_q_len) or max_q_len < 1):
        raise RangeError(f"max_q_len={max_q_len!r}: expected None or a positive int")
    _check_lengths(sl, qsl, num_query_rows, block_table_width, block_size, max_q_len)


def _check_lengths(sl: np.ndarray, qsl: np.ndarray, nq: int, width: int, bs: int, max_q_len: int | None) -> np.ndarray:
    """The value checks of lengths and query offsets (host arrays); returns the q_lens."""
    if int(qsl[0]) != 0:
        raise RangeError(f"query_start_loc: must start at 0, starts at {int(qsl[0])}")
    q_lens = qsl[1:] - qsl[:-1]
    if (q_lens < 0).any():
        i = int(np.argmax(q_lens < 0))
        raise RangeError(
            f"query_start_loc: must be non-decreasing, entry {i + 1} ({int(qsl[i + 1])}) "
            f"is below entry {i} ({int(qsl[i])})"
        )
    if int(qsl[-1]) > nq:
        raise RangeError(f"query_start_loc: ends at {int(qsl[-1])}, past the {nq} query tokens")
    if (sl < 0).any():
        i = int(np.argmax(sl < 0))
        raise RangeError(f"seq_lens: negative length seq_lens[{i}]={int(sl[i])}")
    bad = np.flatnonzero(q_lens > sl)
    if bad.size:
        i = int(bad[0])
        raise RangeError(
            f"request {i}: q_len={int(q_lens[i])} exceeds seq_lens[{i}]={int(sl[i])} "
            "(the query tokens are the newest tokens of the sequence)"
        )
    if max_q_len is not None and q_lens.size and int(q_lens.max()) > max_q_len:
        i = int(np.argmax(q_lens))
        raise RangeError(f"request {i}: q_len={int(q_lens[i])} exceeds this implementation's limit of {max_q_len}")
    over = np.flatnonzero(sl > width * bs)
    if over.size:
        i = int(over[0])
        raise RangeError(f"seq_lens[{i}]={int(sl[i])} exceeds block_table capacity {width} blocks x {bs}")
    return q_lens


def _check_attention_values(
    nq: int, kv: torch.Tensor, bt: torch.Tensor, sl: torch.Tensor, qsl: torch.Tensor, r: int, max_q_len: int | None
) -> None:
    # one synchronising copy of each metadata tensor to the host (the TQ_DEBUG cost)
    nb, bs = kv.shape[0], kv.shape[1]
    sl_c, qsl_c = sl.cpu().long().numpy(), qsl.cpu().long().numpy()
    _check_lengths(sl_c, qsl_c, nq, bt.shape[1], bs, max_q_len)
    bt_c = bt[:r].cpu().long()
    nblocks = torch.from_numpy((sl_c + bs - 1) // bs)
    used = torch.arange(bt_c.shape[1])[None, :] < nblocks[:, None]
    ids = bt_c[used]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= nb):
        bad_id = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise RangeError(f"block_table: block id {bad_id} is outside the cache's {nb} blocks")
