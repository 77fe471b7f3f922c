"""``tq_sycl.attention``: tq's shared attention signature, dispatched to a kernel family.

Where each family runs:

- ``host``: the core headers compiled for the CPU (``tq_sycl._host``), CPU tensors.
- ``scalar`` / ``esimd`` / ``jm`` on XPU tensors: in-process through ``tq_sycl._stock``
  (stock icpx build, same libsycl.so.8 as torch-XPU) when it holds that family;
  otherwise through the bridge to a child running ``tq_sycl._nightly``.
- the same families on CPU tensors: only through the bridge (the child owns the XPU).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from tq_core import LayerCalibration, Preset
from tq_core.contract import check_attention_args
from tq_core.errors import BackendUnavailableError, DeviceError, PresetError

from . import extensions, kernel_args, toolchain, tuning
from .errors import KernelChoiceError

KERNELS = ("scalar", "esimd", "jm", "host")

Run = Callable[[kernel_args.PreparedCall], torch.Tensor]

_bridge_lock = threading.Lock()
_bridge = None  # the process-wide nightly bridge, started on first use; it serialises requests


def attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    preset: str | Preset,
    scale: float,
    out: torch.Tensor | None = None,
    kernel: str = "scalar",
    *,
    num_splits: int | None = None,
    calibration: LayerCalibration | None = None,
) -> torch.Tensor:
    """``tq_core.attention`` (same contract), computed by the kernel family ``kernel``.

    ``kernel`` picks the implementation (``"scalar"``, ``"esimd"``, ``"jm"`` or ``"host"``);
    ``num_splits`` overrides the split-KV count from :mod:`tq_sycl.tuning`. Raises
    ``BackendUnavailableError`` naming what is missing when the family cannot run here.
    tq's calibrated formats (``calibration=`` the layer's) run on ``"host"`` only; the
    device families raise ``PresetError`` for them.
    """
    if kernel not in KERNELS:
        raise KernelChoiceError(f"kernel={kernel!r}: expected one of {KERNELS}")
    if num_splits is not None:
        kernel_args.check_num_splits(num_splits)
    host = kernel == "host"
    if host and isinstance(query, torch.Tensor) and query.device.type != "cpu":
        raise DeviceError(f"query: is on {query.device}; kernel='host' runs on CPU tensors")
    # validated here, once, before looking for a build: a bad argument is reported as
    # such even where no SYCL build exists
    checked = check_attention_args(
        query,
        kv_cache,
        block_table,
        seq_lens,
        query_start_loc,
        preset,
        scale,
        out,
        kernel_args.checks_values(query),
        calibration=calibration,
    )
    if checked.preset.calibrated and not host:
        raise PresetError(
            f"{checked.preset.name}: kernel={kernel!r} does not implement calibrated formats; kernel='host' does"
        )
    if host:
        num_splits = kernel_args.check_num_splits(_splits(num_splits))
    if checked.num_reqs == 0 or query.shape[0] == 0 or checked.num_q_heads == 0:
        # nothing to compute: the result is ``out`` as it is (or an empty tensor), as
        # tq_core gives; the kernels are not called (they need a q head per kv head)
        return out if out is not None else torch.empty_like(query)
    run, splits = (_host_run, num_splits) if host else _device_run(kernel, query, kv_cache, seq_lens, num_splits)
    call = kernel_args.prepare(
        checked, query, kv_cache, block_table, seq_lens, query_start_loc, scale, out, splits, calibration
    )
    return run(call)


def _splits(num_splits: int | None) -> int:
    """The caller's split count, else ``TQ_SYCL_NUM_SPLITS``, else 1 (host and bridge calls)."""
    return num_splits if num_splits is not None else (tuning.env_num_splits() or 1)


def _row_tiles(query: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor) -> int:
    """Row tiles of the launch grid, from shapes alone (csrc/include/tq/params.hpp num_row_tiles)."""
    nq, hq, _ = query.shape
    return nq * (hq // max(kv_cache.shape[2], 1)) // kernel_args.ROWS_PER_TILE + seq_lens.shape[0]


def _host_run(call: kernel_args.PreparedCall) -> torch.Tensor:
    """The host core on CPU tensors (what ``kernel="host"`` runs)."""
    extensions.host_module().attention(call.args)
    return call.finish()


def _device_run(
    kernel: str, query: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor, num_splits: int | None
) -> tuple[Run, int]:
    """Where a SYCL family runs for this call (the stock build in-process, else the nightly
    bridge) and its split count; BackendUnavailableError saying why neither can."""
    reasons: list[str] = []
    if query.device.type == "xpu":
        try:
            mod = extensions.stock_module()
            if kernel in mod.kernels():
                if num_splits is None:
                    per_split = _row_tiles(query, kv_cache, seq_lens) * kv_cache.shape[2]
                    num_splits = tuning.choose_num_splits(torch.xpu.get_device_name(query.device), per_split)
                return functools.partial(_stock_attention, mod, kernel), num_splits
            reasons.append(f"tq_sycl._stock holds {list(mod.kernels())}, not {kernel!r}")
        except BackendUnavailableError as exc:
            reasons.append(str(exc))
    bridge = _nightly_bridge(reasons)
    if bridge is not None:
        if kernel in bridge.kernels:
            return functools.partial(bridge.attention, kernel=kernel), _splits(num_splits)
        reasons.append(f"the nightly bridge child holds {bridge.kernels}, not {kernel!r}")
    raise BackendUnavailableError(f"kernel={kernel!r} cannot run here: " + "; ".join(reasons))


def _stock_attention(mod: Any, kernel: str, call: kernel_args.PreparedCall) -> torch.Tensor:
    """A prepared call on the in-process stock build, with workspaces from torch's allocator."""
    query = call.query
    nq, hq, d = query.shape
    programs = _row_tiles(query, call.kv_cache, call.seq_lens) * call.kv_cache.shape[2] * call.args["num_splits"]
    rows = programs * kernel_args.ROWS_PER_TILE
    # torch's caching allocator: no device sync, reused across calls
    q_rot = torch.empty(nq * hq * d, dtype=torch.float32, device=query.device)
    ws_acc = torch.empty(max(rows, 1) * d, dtype=torch.float32, device=query.device)
    ws_ml = torch.empty(2, max(rows, 1), dtype=torch.float32, device=query.device)
    call.keep += [q_rot, ws_acc, ws_ml]
    call.args.update(
        q_rot=q_rot.data_ptr(),
        ws_acc=ws_acc.data_ptr(),
        ws_m=ws_ml[0].data_ptr(),
        ws_l=ws_ml[1].data_ptr(),
        queue=torch.xpu.current_stream(query.device).sycl_queue,
    )
    mod.attention(call.args, kernel)
    return call.finish()


def _nightly_bridge(reasons: list[str]):
    """The shared bridge to the nightly build, or None (with why appended to ``reasons``)."""
    global _bridge
    root = toolchain.nightly_root()
    if root is None:
        reasons.append("no nightly bridge: TQ_SYCL_NIGHTLY_ROOT is not set")
        return None
    if extensions.module_file("_nightly") is None:
        reasons.append("no nightly bridge: tq_sycl._nightly is not built (nox -s sycl_nightly builds it)")
        return None
    from .bridge.client import Bridge

    with _bridge_lock:
        if _bridge is None or not _bridge.alive:
            if _bridge is not None:
                _bridge.close()  # a dead child's segment and stderr file go now, not at GC
            _bridge = Bridge(backend="nightly")
            _bridge.start()
        return _bridge


def available_kernels() -> dict[str, str]:
    """Kernel family -> where it would run in this process, without starting anything."""
    found = {"host": "tq_sycl._host (CPU)" if extensions.module_file("_host") else "not built"}
    stock = extensions.module_file("_stock")
    nightly = extensions.module_file("_nightly") if toolchain.nightly_root() else None
    for k in ("scalar", "esimd", "jm"):
        where = []
        if stock:
            where.append("tq_sycl._stock in-process (if it holds this family and an XPU is visible)")
        if nightly:
            where.append("tq_sycl._nightly through the bridge (if it holds this family)")
        found[k] = "; ".join(where) or "no SYCL build"
    return found
