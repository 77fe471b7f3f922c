"""The contract between tq-core and every backend.

A *backend* is one implementation of tq's two operations, with the signatures and the
semantics of the reference functions :func:`tq_core.store` and :func:`tq_core.attention`::

    store(key, value, kv_cache, slot_mapping, preset) -> None
    attention(query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale,
              out=None, **hints) -> Tensor

What tq-core gives a backend, so that no backend re-derives it:

- :func:`check_store_args` / :func:`check_attention_args`: every shape, dtype and device
  check, returning :class:`StoreArgs` / :class:`AttentionArgs` (preset, layout and the
  :class:`KernelFields` the kernels address the cache with). Checks of metadata *values*
  read device memory; fast backends pass ``check_values=debug_enabled()``.
- :func:`check_host_metadata`: the same length and offset checks on host (CPU) copies of
  the metadata, for callers that have them (tq-vllm): no device read, no synchronisation.
  :func:`check_out_layout`: the layout rule for ``out`` that ``check_attention_args``
  applies.
- :func:`debug_enabled` (``TQ_DEBUG``) and :func:`env_flag`, the one parser of boolean
  environment switches.
- :func:`gather_kv`: a request's cached keys and values, decoded (what attention reads).
- :class:`Backend` and the registry: a backend announces itself with an entry point in
  the ``tq.backends`` group whose value is a function taking no arguments and returning
  a :class:`Backend`. Loading is lazy (a backend's heavy imports happen only when it is
  asked for); :func:`select_backend` picks one for a device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

import torch

from .attention import attention as core_attention
from .checks import (
    AttentionArgs,
    StoreArgs,
    check_attention_args,
    check_host_metadata,
    check_out_layout,
    check_store_args,
    debug_enabled,
)
from .env import env_flag
from .errors import BackendUnavailableError
from .layout import KernelFields
from .paged import gather_kv
from .paged import store as core_store

ENTRY_POINT_GROUP = "tq.backends"


@dataclass(frozen=True)
class Backend:
    """One implementation of tq's ``store`` and ``attention``.

    ``device_types``: the torch device types its tensors may live on; ``auto_device_types``
    (default: the same) those where :func:`select_backend` may pick it unasked (tq-triton
    runs on CPU tensors under Triton's interpreter, but is never the automatic CPU choice).
    ``priority``: the larger wins when :func:`select_backend` chooses automatically. ``max_query_len``: the
    longest q_len per request its attention tiles are planned for (longer requests are
    still computed correctly, slower); ``None`` means no limit. ``takes_max_query_len``:
    its attention accepts the ``max_query_len=`` tile hint. ``calibrated``: its store and
    attention implement tq's calibrated formats (``calibration=``, and the store's
    ``positions=``, as tq-core's). ``plan_attention``: where not None, the backend plans its
    attention launches once for many calls: ``plan_attention(query, kv_cache, num_reqs,
    preset, max_query_len)`` (shapes only, never values) returns a plan that ``attention``
    takes as ``plan=`` for every call with those shapes (vLLM's plugin makes one per step and
    kv-cache geometry); None: each call plans itself.
    """

    name: str
    description: str
    store: Callable[..., None] | None
    attention: Callable[..., torch.Tensor]
    device_types: tuple[str, ...]
    priority: int = 0
    max_query_len: int | None = None
    takes_max_query_len: bool = False
    auto_device_types: tuple[str, ...] | None = None
    calibrated: bool = False
    plan_attention: Callable[..., object] | None = None

    def picked_automatically_on(self, device_type: str) -> bool:
        allowed = self.device_types if self.auto_device_types is None else self.auto_device_types
        return device_type in allowed


def core_backend() -> Backend:
    """tq-core's reference ops: any device torch runs on, readable rather than fast."""
    return Backend(
        name="core",
        description="tq_core (torch reference)",
        store=core_store,
        attention=core_attention,
        device_types=("cpu", "cuda", "xpu"),
        priority=0,
        calibrated=True,
    )


@functools.cache
def backend_names() -> tuple[str, ...]:
    """The names of every installed backend (``core`` always), without loading any."""
    names = {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return tuple(sorted(names | {"core"}))


@functools.cache
def load_backend(name: str) -> Backend:
    """The backend called ``name``; raises :class:`BackendUnavailableError` saying why not."""
    if name == "core":
        return core_backend()
    eps = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not eps:
        raise BackendUnavailableError(
            f"backend {name!r} is not installed: installed backends are {list(backend_names())}"
        )
    try:
        backend = eps[0].load()()
    except BackendUnavailableError:
        raise
    except Exception as exc:  # a broken install must say what broke, not crash the caller
        raise BackendUnavailableError(
            f"backend {name!r} ({eps[0].value}) cannot load: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(backend, Backend):
        raise BackendUnavailableError(
            f"backend {name!r}: {eps[0].value} returned {type(backend).__name__}, not a Backend"
        )
    return backend


def select_backend(
    device: torch.device | str, name: str = "auto", *, need_store: bool = True
) -> tuple[Backend, list[str]]:
    """The backend to run on ``device``, and why the better-ranked ones were passed over.

    ``name="auto"`` picks the installed backend of highest priority that runs on the
    device type (and has a ``store`` when ``need_store``); a named backend is returned
    when it runs there, else :class:`BackendUnavailableError` says why not.
    """
    dev = torch.device(device).type
    if name != "auto":
        backend = load_backend(name)
        if dev not in backend.device_types:
            raise BackendUnavailableError(
                f"backend {name!r} runs on {list(backend.device_types)}, not on {dev!r} tensors"
            )
        if need_store and backend.store is None:
            raise BackendUnavailableError(f"backend {name!r} has no store")
        return backend, []
    skipped: list[str] = []
    found: list[Backend] = []
    for n in backend_names():
        try:
            b = load_backend(n)
        except BackendUnavailableError as exc:
            skipped.append(str(exc))
            continue
        if b.picked_automatically_on(dev) and (b.store is not None or not need_store):
            found.append(b)
    best = max(found, key=lambda b: b.priority)  # core runs everywhere, so found is never empty
    return best, skipped


__all__ = [
    "ENTRY_POINT_GROUP",
    "AttentionArgs",
    "Backend",
    "KernelFields",
    "StoreArgs",
    "backend_names",
    "check_attention_args",
    "check_host_metadata",
    "check_out_layout",
    "check_store_args",
    "core_backend",
    "debug_enabled",
    "env_flag",
    "gather_kv",
    "load_backend",
    "select_backend",
]
