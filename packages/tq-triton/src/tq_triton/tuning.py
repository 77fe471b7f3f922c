"""Launch parameters from per-device tables, with validated environment overrides.

Lookup order for an attention launch on device ``dev`` with preset ``p`` and query
bucket ``b`` (``q1``, ``q2``, ``q4``, ``q8``, ``q16``: the batch's longest q_len rounded up to a
power of two, at most 16; ``q1`` is decode, ``q8`` speculative verification of 7-8 tokens):
built-in defaults, then the first table whose ``match`` substrings occur in the device
name (user tables in ``$TQ_TUNING_DIR`` or ``~/.cache/tq/tuning`` before the shipped
ones), reading ``attention.default["*"]``, ``attention.default[b]``, ``attention[p]["*"]``,
``attention[p][b]`` in that order, then ``attention[p]["b:mM"]`` where the tile has ``M`` query
rows (the q heads of a GQA group, padded to a power of two, times the query tokens per program:
verification with 8 q heads per kv head has 64-row tiles, with 4 it has 32-row tiles, and the
best tile can differ between them), then ``attention[p]["b:dD"]`` for head dimension ``D`` (the
best kernel, tiles and register cap differ between head_dims). A launch that the portable
Triton kernel serves reads the table's ``portable`` section too, keyed the same way: after each
``attention`` entry comes the ``portable`` entry of the same key (the portable kernel's best
tiles differ from those of the vendor kernels that the ``attention`` entries are tuned for; a
more specific ``attention`` entry still overrides a less specific ``portable`` one). Then the
environment variables of
:data:`ENV_OVERRIDES` (``TQ_BLOCK_KV``, ``TQ_NUM_WARPS``, ... ``TQ_SKIP_EMPTY``). The
store reads its table entry, then :data:`STORE_ENV_OVERRIDES` (``TQ_CODE_SEARCH``).
Setting a variable of :data:`REMOVED_ENV` (a knob that no longer exists) raises
``TuningError``.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from tq_core.errors import TuningError

from .device import device_key


@dataclass(frozen=True)
class AttentionConfig:
    block_kv: int = 64
    num_warps: int = 4
    num_stages: int = 2
    # 0: choose from the grid size so that about ``waves`` programs per multiprocessor run
    kv_splits: int = 0
    waves: int = 4
    max_kv_splits: int = 64
    # 1: prefetch the next tile into registers by hand; 0: leave staging to Triton's pipeliner
    prefetch: int = 1
    # cuda only: cap registers per thread (Triton's ``maxnreg``) so that more programs fit on
    # a multiprocessor; 0 leaves the choice to the compiler
    max_registers: int = 0
    # the fewest query rows of one program's tile: a tile with fewer rows (q heads of the GQA
    # group, padded to a power of two, times query tokens) takes more query tokens per program
    # and masks the extra rows. On an H200, 64 rows let Hopper's warpgroup products run
    # with both operands in shared memory
    min_rows: int = 16
    # the kernel: 1 runs the explicit-layout (Gluon) kernel where it applies (cuda, compute
    # capability 8.9 or later; vLLM's four presets and the calibrated tq_k4v3 and tq_k4v4;
    # tiles of 16-64 rows, block_kv 16-64: plan.gluon_refusal), and the portable Triton kernel
    # elsewhere (with TQ_DEBUG=1 the reason is logged once); 2 runs the token-rows kernel
    # (nvidia/token_rows_kernel.py) where it applies (plan.token_rows_refusal: k8v4, k3v4_nc,
    # 4bit_nc, 3bit_nc, tq_k4v3 and tq_k4v4 at head_dim 128, the longest q_len times the padded
    # GQA group at most 16, block sizes of at least 16): scores as K Q^T with the tokens on the
    # matrix unit's rows, keys and values decoded straight into its operand registers; else
    # what 1 runs. The H200 table asks for 2 at decode and q_len 2-4 of the vLLM formats and
    # decode and q_len 2 of tq_k4v3 and tq_k4v4; 0 always runs the portable kernel
    gluon: int = 0
    # the Gluon kernel's instruction set for 64-row tiles on sm_90: 1 uses Hopper's
    # warpgroup products, which read the shared tiles once for all four warps (the H200
    # table's poc entries); 0, and every other tile, mma.sync per warp
    wgmma: int = 0
    # N > 0 sizes the kv splits from the batch's sequence lengths on the device: one largest
    # split size for the whole batch, chosen so that all splits fill about one wave of N
    # programs per multiprocessor, and no request takes more than the grid's splits; each
    # request deals its tiles out evenly over the splits it needs, so a long request takes
    # more splits than a short one. 0: each request's sequence is divided evenly over the
    # grid's splits. Tables set it where a sweep found it faster (ragged and verify batches;
    # never decode, where it was slower): docs/perf/runs/2026-12-02-split-knobs-sweep
    split_budget: int = 0
    # 1 lets a kv split with no position for its query chunk (a request shorter than the
    # split count leaves some) skip the query, the tile loop and its partial output, writing
    # only -inf log-sum-exps that the merge then skips. Tables set it with split_budget where
    # the same sweep found it faster
    skip_empty: int = 0


@dataclass(frozen=True)
class StoreConfig:
    block_t: int = 16
    num_warps: int = 4
    # 1 finds codebook codes (keys, and calibrated formats' values) by binary search over
    # the boundaries (one comparison per code bit; the H200 table's entries for the codebook
    # presets); 0 counts the boundaries at or below each coordinate (one comparison per
    # boundary); 2 looks each coordinate's bin up in a table of uniform bins and compares
    # it with the one boundary there (``code_bins``; a codebook with no such table is
    # searched as with 1). All give the same codes.
    code_search: int = 0
    # cuda only: cap registers per thread (Triton's ``maxnreg``) so that more programs fit on
    # a multiprocessor; 0 leaves the choice to the compiler. No shipped entry caps the store:
    # the uniform bins run faster uncapped (docs/perf/runs/2026-12-07-store-bins)
    max_registers: int = 0


_POW2 = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
_LIMITS: dict[str, tuple[int, int, bool]] = {
    # name: (min, max, power of two required)
    "block_kv": (16, 256, True),
    "num_warps": (1, 32, True),
    "num_stages": (1, 8, False),
    "kv_splits": (0, 1024, False),
    "waves": (1, 64, False),
    "max_kv_splits": (1, 1024, False),
    "block_t": (16, 128, True),
    "prefetch": (0, 1, False),
    "max_registers": (0, 255, False),
    "code_search": (0, 2, False),
    "min_rows": (16, 128, True),
    "gluon": (0, 2, False),
    "wgmma": (0, 1, False),
    "split_budget": (0, 64, False),
    "skip_empty": (0, 1, False),
}
ENV_OVERRIDES = {
    "TQ_BLOCK_KV": "block_kv",
    "TQ_NUM_WARPS": "num_warps",
    "TQ_NUM_STAGES": "num_stages",
    "TQ_NUM_KV_SPLITS": "kv_splits",
    "TQ_PREFETCH": "prefetch",
    "TQ_MAX_REGISTERS": "max_registers",
    "TQ_MIN_ROWS": "min_rows",
    "TQ_GLUON": "gluon",
    "TQ_WGMMA": "wgmma",
    "TQ_SPLIT_BUDGET": "split_budget",
    "TQ_SKIP_EMPTY": "skip_empty",
}
# variables of knobs that no longer exist, and what replaced them: setting one is an error,
# not silently ignored
REMOVED_ENV = {
    "TQ_VALUE_ACC": "the value product always accumulates inside the matrix unit",
    "TQ_VALUE_WORDS": "the Gluon kernel always decodes 4-bit values two per word, the portable kernel never",
    "TQ_BF16_PARTIALS": "partial outputs are float32",
    "TQ_STORE_ROTATION": (
        "the store always rotates by butterflies: on the H200 the matrix-unit rotation ran at "
        "0.45-0.84x of its speed (docs/perf/runs/2026-12-04-store)"
    ),
    "TQ_STORE_LEAN": (
        "the store always runs its lean code, 1-4% faster on the H200, with 64-bit offsets only "
        "where the strides need them (docs/perf/runs/2026-12-04-store)"
    ),
    "TQ_KEY_LUT": (
        "the portable kernel always looks 3- and 4-bit codes up in its register table, in plain Triton "
        "operations: on an H100 as fast as the PTX byte permutes (docs/perf/runs/2026-12-05-h100-vendor-rule)"
    ),
    "TQ_TOKEN_ROWS": "TQ_GLUON=2 asks for the token-rows kernel",
    "TQ_INT_VALUES": (
        "every kernel decodes tq_k4v4's symmetric values from their codes' bits: on an H100 1.02-1.17x "
        "faster on the default path and 1.32-1.61x on the portable kernel (docs/perf/runs/2026-12-06-knobs)"
    ),
    "TQ_SELECTOR_PAIRS": (
        "the token-rows kernel builds 3-bit keys' selectors one 4-code group at a time: no table set the "
        "pairwise build, which was never timed alone on the H200"
    ),
    "TQ_NORM_MMA": (
        "the token-rows kernel always sums the squared centroids of keys with norm correction on the "
        "matrix unit: on an H100 1.01-1.12x faster than the lanes' sums at decode and q_len 2, 2% "
        "slower at q_len 4 (docs/perf/runs/2026-12-06-knobs)"
    ),
}
# table fields of knobs that no longer exist: an entry that sets one is an error, so that a
# table written before the change does not silently run another kernel
REMOVED_FIELDS = {
    "token_rows": '"gluon": 2 asks for the token-rows kernel',
    "key_lut": "the portable kernel always looks 3- and 4-bit codes up in its register table",
    "selector_pairs": "the token-rows kernel builds 3-bit keys' selectors one 4-code group at a time",
    "int_values": "every kernel decodes tq_k4v4's symmetric values from their codes' bits",
    "norm_mma": "the token-rows kernel always sums key norms on the matrix unit",
    "rotation": REMOVED_ENV["TQ_STORE_ROTATION"],
    "lean": REMOVED_ENV["TQ_STORE_LEAN"],
}
STORE_ENV_OVERRIDES = {
    "TQ_CODE_SEARCH": "code_search",
}


def _validate(name: str, value: Any, where: str) -> int:
    lo, hi, pow2 = _LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TuningError(f"{where}: {name}={value!r} is not an integer")
    if not lo <= value <= hi or (pow2 and value not in _POW2):
        kind = "a power of two " if pow2 else ""
        raise TuningError(f"{where}: {name}={value} must be {kind}in [{lo}, {hi}]")
    return value


def _apply(cfg: Any, entry: dict[str, Any] | None, where: str) -> Any:
    if not entry:
        return cfg
    known = {f.name for f in fields(cfg)}
    updates = {}
    for k, v in entry.items():
        if k in REMOVED_FIELDS:
            raise TuningError(f"{where}: field {k!r} was removed ({REMOVED_FIELDS[k]}); edit the entry")
        if k not in known:
            continue  # entries may carry fields for other config kinds or notes
        updates[k] = _validate(k, v, where)
    return replace(cfg, **updates)


def user_table_dir() -> Path:
    return Path(os.environ.get("TQ_TUNING_DIR", Path.home() / ".cache" / "tq" / "tuning"))


def _load(path: Path | Any) -> dict[str, Any]:
    try:
        table = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TuningError(f"tuning table {path}: {exc}") from exc
    if not isinstance(table, dict) or not isinstance(table.get("match"), list):
        raise TuningError(f"tuning table {path}: expected an object with a 'match' list")
    table["_path"] = str(path)
    return table


@functools.cache
def _tables(user_dir: str) -> tuple[dict[str, Any], ...]:
    found: list[dict[str, Any]] = []
    udir = Path(user_dir)
    if udir.is_dir():
        for p in sorted(udir.glob("*.json")):
            # a user directory may hold other JSON (bench results, say): skip it loudly, not fatally
            try:
                found.append(_load(p))
            except TuningError as exc:
                warnings.warn(f"{exc}; ignoring it", stacklevel=2)
    shipped = resources.files("tq_triton").joinpath("tuning_tables")
    found += [_load(p) for p in sorted(shipped.iterdir(), key=lambda p: p.name) if p.name.endswith(".json")]
    return tuple(found)


def table_for(device_name: str) -> dict[str, Any] | None:
    """The first table (user tables first) whose ``match`` substrings occur in ``device_name``."""
    for t in _tables(str(user_table_dir())):
        if any(m.lower() in device_name.lower() for m in t["match"]):
            return t
    return None


def clear_cache() -> None:
    """Forget loaded tables (after ``tq sweep`` wrote a new one)."""
    _tables.cache_clear()
    _attention_cached.cache_clear()
    _store_cached.cache_clear()
    _xpu_launch_cached.cache_clear()


def q_bucket(max_query_len: int) -> str:
    n = min(max(1, max_query_len), 16)
    return f"q{1 << (n - 1).bit_length()}"


def _env_overrides(overrides: dict[str, str] = ENV_OVERRIDES) -> tuple[tuple[str, int], ...]:
    out = []
    for var, why in REMOVED_ENV.items():
        if os.environ.get(var):
            raise TuningError(f"environment {var} was removed ({why}); unset it")
    for var, name in overrides.items():
        raw = os.environ.get(var)
        if raw is None or raw == "":
            continue
        try:
            val = int(raw)
        except ValueError:
            raise TuningError(f"environment {var}={raw!r} is not an integer") from None
        out.append((name, _validate(name, val, f"environment {var}")))
    return tuple(out)


# the sections of a table that attention launches read: every launch the first, launches of the
# portable kernel both
ATTENTION_SECTIONS = ("attention", "portable")


@functools.cache
def _attention_cached(
    dev_name: str,
    preset: str,
    bucket: str,
    env: tuple[tuple[str, int], ...],
    rows: int = 0,
    head_dim: int = 0,
    portable: bool = False,
) -> AttentionConfig:
    cfg = AttentionConfig()
    t = table_for(dev_name)
    if t is not None:
        where = t["_path"]
        keys = ["*", bucket] + ([f"{bucket}:m{rows}"] if rows else []) + ([f"{bucket}:d{head_dim}"] if head_dim else [])
        tops = [t.get(name, {}) for name in ATTENTION_SECTIONS[: 2 if portable else 1]]
        for section in ("default", preset):
            for key in keys:
                for top in tops:
                    cfg = _apply(cfg, top.get(section, {}).get(key), where)
    return _apply(cfg, dict(env), "environment")


def attention_config(
    device: torch.device,
    preset: str,
    max_query_len: int,
    rows: int | None = None,
    head_dim: int | None = None,
    portable: bool = False,
) -> AttentionConfig:
    """Launch parameters for a batch whose longest request has ``max_query_len`` query tokens;
    ``rows``: the query rows of one program's tile, for entries keyed by them (``"q8:m64"``);
    ``head_dim``: for entries keyed by it (``"q1:d64"``); ``portable``: for a launch of the
    portable kernel (the table's ``portable`` entries too)."""
    return attention_config_for(device_key(device), preset, max_query_len, rows, head_dim, portable)


def attention_config_for(
    device_name: str,
    preset: str,
    max_query_len: int,
    rows: int | None = None,
    head_dim: int | None = None,
    portable: bool = False,
) -> AttentionConfig:
    """:func:`attention_config` for a device named ``device_name`` (``device.device_key``)."""
    bucket = q_bucket(max_query_len)
    return _attention_cached(device_name, preset, bucket, _env_overrides(), rows or 0, head_dim or 0, portable)


@functools.cache
def _store_cached(dev_name: str, preset: str, env: tuple[tuple[str, int], ...]) -> StoreConfig:
    cfg = StoreConfig()
    t = table_for(dev_name)
    if t is not None:
        st = t.get("store", {})
        cfg = _apply(cfg, st.get("*"), t["_path"])
        cfg = _apply(cfg, st.get(preset), t["_path"])
    return _apply(cfg, dict(env), "environment")


def store_config(device: torch.device, preset: str) -> StoreConfig:
    """The store's launch parameters: built-in defaults, the device's table, then
    :data:`STORE_ENV_OVERRIDES` (``TQ_CODE_SEARCH``) from the environment."""
    return _store_cached(device_key(device), preset, _env_overrides(STORE_ENV_OVERRIDES))


@functools.cache
def _xpu_launch_cached(dev_name: str) -> tuple[tuple[str, Any], ...]:
    t = table_for(dev_name)
    return tuple((t or {}).get("xpu_launch_options", {}).items())


def launch_options(device: torch.device) -> dict[str, Any]:
    """Backend-specific launch keywords (e.g. Intel's ``grf_mode``) from the device's table.

    Called on every store and attention launch: no table lookup off xpu, a cached one on it.
    """
    if device.type != "xpu":
        return {}
    return launch_options_for(device_key(device), device.type)


def launch_options_for(device_name: str, device_type: str) -> dict[str, Any]:
    """:func:`launch_options` for a device named ``device_name`` of torch type ``device_type``."""
    return dict(_xpu_launch_cached(device_name)) if device_type == "xpu" else {}
