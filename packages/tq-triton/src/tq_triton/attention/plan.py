"""The launch plan of an attention call: what runs, decided on the host from the call's shapes,
the tuning table and the device's facts, before anything is launched.

:func:`plan_attention` answers every question of a launch in one place: the tuned parameters
(``tuning``), the tile's query rows, the kv splits, which kernel runs (the token-rows kernel
where ``AttentionConfig.gluon`` is 2 and :func:`token_rows_refusal` and :func:`gluon_refusal`
have no objection; else the Gluon kernel where ``gluon`` is 1 or 2 and :func:`gluon_refusal`
has none; else the portable one: one visible rule, logged once per reason under
``TQ_DEBUG``), its
instruction set, the key decode, and the compile-time arguments. ``launch`` then only
allocates and launches.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton

from tq_core import Preset
from tq_core.contract import debug_enabled

from ..device import DeviceFacts
from ..device_tensors import cached_poly_coefficients, cached_poly_value_coefficients
from ..tuning import AttentionConfig, attention_config_for, launch_options_for

# the longest q_len per request that the tiles are planned for; longer requests are
# computed correctly in several query chunks, slower
MAX_QUERY_LEN = 16
# the most query rows (q heads of a GQA group times query tokens) of one program's tile
MAX_BLOCK_M = 128
# the Gluon kernel: one warp per 16 query rows, at most 4 warps
GLUON_ROWS = (16, 32, 64)
GLUON_HEAD_DIMS = (64, 128, 256)
GLUON_BLOCK_KV = (16, 32, 64)

logger = logging.getLogger("tq_triton")


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def longest_query(num_query_tokens: int, num_reqs: int, max_query_len: int | None) -> int:
    """The caller's ``max_query_len`` hint or, without one, the longest q_len possible when every
    request has >= 1 token. A request longer than the hint is still correct (the kernel loops
    over chunks), only slower."""
    return max_query_len if max_query_len is not None else num_query_tokens - num_reqs + 1


def plan_block_q(group_pad: int, max_query_len: int, min_rows: int = 16) -> int:
    """Query tokens per program chunk for a batch whose longest request has ``max_query_len``,
    so that the tile has at least ``min_rows`` rows (a power of two >= 16: tl.dot needs 16)
    where MAX_BLOCK_M allows."""
    q = next_pow2(max(1, min(max_query_len, MAX_QUERY_LEN)))
    q = max(q, min_rows // group_pad if group_pad < min_rows else 1)
    return max(1, min(q, MAX_BLOCK_M // group_pad))


def plan_splits(cfg: AttentionConfig, multiprocessors: int, num_reqs: int, num_kv_heads: int) -> int:
    """How many programs share one (request, kv head)'s sequence: the table's fixed count, or
    enough for about ``cfg.waves`` programs per multiprocessor, at most ``cfg.max_kv_splits``."""
    if cfg.kv_splits:
        return cfg.kv_splits
    want = triton.cdiv(cfg.waves * multiprocessors, max(1, num_reqs * num_kv_heads))
    return max(1, min(cfg.max_kv_splits, want))


@functools.cache
def gluon_available() -> bool:
    """Whether the installed Triton has Gluon with the Ampere matrix instruction."""
    try:
        from triton.experimental.gluon.language.nvidia.ampere import mma_v2  # noqa: F401
    except ImportError:
        return False
    return True


def gluon_keys(preset: Preset) -> bool:
    """Whether the Gluon kernel decodes the preset's keys: fp8, or 3- or 4-bit codebook
    codes (looked up in ``key_lut``'s register table, which the launcher then passes as
    ``Centroids``; for 4-bit codes the table of the symmetric codebook's magnitudes)."""
    return preset.key_is_fp8 or preset.key_bits in (3, 4)


def gluon_values(preset: Preset) -> bool:
    """Whether the Gluon kernel decodes the preset's values: uniform 4-bit codes, or uniform
    3-bit codes where the keys are codebook codes (its value layout shares the 3-bit keys'
    threads), each with a scale and a zero point; or a calibrated format's 3- or 4-bit
    table codes (Lloyd-Max, or tq_k4v4's symmetric ones) with codebook keys (looked up in
    the value table's registers)."""
    if preset.calibrated:
        return preset.value_bits in (3, 4) and not preset.key_is_fp8
    return preset.value_bits == 4 or (preset.value_bits == 3 and not preset.key_is_fp8)


def gluon_refusal(preset: Preset, head_dim: int, rows: int, block_kv: int, block_size: int, facts: DeviceFacts) -> str:
    """Why ``gluon_kernel`` cannot compute this launch, or ``""`` where it can: it needs an
    NVIDIA GPU of compute capability 8.9 or later (fp8 conversions in hardware), keys and
    values it decodes (:func:`gluon_keys`, :func:`gluon_values`: every vLLM preset, k8v4,
    k3v4_nc, 4bit_nc and 3bit_nc, and the calibrated tq_k4v3 and tq_k4v4; not tq_k6v5, whose
    6-bit keys and 5-bit values have no register table), head_dim 64/128/256, tiles
    of 16, 32 or 64 query rows (one warp per 16), 16-64 tokens per tile, and a power-of-two
    block size (a tile's groups of positions then never straddle a block)."""
    if not facts.nvidia or facts.capability < (8, 9):
        return "the device is not an NVIDIA GPU of compute capability 8.9 or later"
    if not (gluon_keys(preset) and gluon_values(preset)):
        return (
            f"{preset.name}: the Gluon kernel decodes fp8, 3- or 4-bit codebook keys with 4-bit values,"
            " codebook keys with 3-bit values, or 3- and 4-bit Lloyd-Max values with codebook keys"
        )
    if head_dim not in GLUON_HEAD_DIMS:
        return f"head_dim {head_dim} is not one of {GLUON_HEAD_DIMS}"
    if rows not in GLUON_ROWS:
        return f"a tile of {rows} query rows is not one of {GLUON_ROWS}"
    if block_kv not in GLUON_BLOCK_KV:
        return f"block_kv {block_kv} is not one of {GLUON_BLOCK_KV}"
    if block_size <= 0 or block_size & (block_size - 1):
        return f"block_size {block_size} is not a power of two"
    if not gluon_available():
        return "this Triton has no Gluon with the Ampere matrix instruction"
    return ""


# the token-rows kernel: 8 or 16 query columns per program (one or two column tiles), 16-token
# row tiles
TOKEN_ROWS_COLUMNS = 16
TOKEN_ROWS_PRESETS = (
    "turboquant_k8v4",
    "turboquant_k3v4_nc",
    "turboquant_4bit_nc",
    "turboquant_3bit_nc",
    "tq_k4v3",
    "tq_k4v4",
)


def token_rows_refusal(
    preset: Preset, head_dim: int, group_pad: int, block_kv: int, block_size: int, longest: int = 1
) -> str:
    """Why ``token_rows_kernel`` cannot compute a launch the Gluon kernel may run, or ``""``:
    it decodes fp8, 3- and 4-bit codebook keys with uniform 4-bit values (k8v4, k3v4_nc,
    4bit_nc), 3-bit keys with uniform 3-bit values (3bit_nc) and the calibrated formats with
    4-bit keys and 3-bit Lloyd-Max or 4-bit symmetric values (tq_k4v3, tq_k4v4) at head_dim 128; its 16 query
    columns must hold the batch's longest q_len (``longest``, rounded up to a power of two)
    times the q heads per kv head (``group_pad``, padded), so that each program reads the
    cache once; 16-64 tokens per tile; blocks of at least 16 tokens (a 16-token row tile then
    lies in one block). A request longer than the ``max_query_len`` hint is still computed
    correctly, in more query chunks."""
    if preset.name not in TOKEN_ROWS_PRESETS:
        return f"{preset.name}: the token-rows kernel decodes {', '.join(TOKEN_ROWS_PRESETS)}"
    if head_dim != 128:
        return f"head_dim {head_dim}: the token-rows kernel is written for 128"
    if _token_rows_need(group_pad, longest) > TOKEN_ROWS_COLUMNS:
        return (
            f"q_len {longest} times {group_pad} q heads per kv head (padded) does not fit the token-rows kernel's"
            f" {TOKEN_ROWS_COLUMNS} query columns"
        )
    if block_kv not in GLUON_BLOCK_KV:
        return f"block_kv {block_kv} is not one of {GLUON_BLOCK_KV}"
    if block_size < 16:
        return f"block_size {block_size} is below the token-rows kernel's 16"
    return ""


def _token_rows_need(group_pad: int, longest: int) -> int:
    """The query columns a program needs to read the cache once: the longest q_len, rounded up
    to a power of two, times the padded group."""
    return next_pow2(max(1, min(longest, MAX_QUERY_LEN))) * group_pad


def token_rows_columns(group_pad: int, longest: int) -> int:
    """The token-rows kernel's query columns for a batch: 8 (one column tile) where
    :func:`_token_rows_need` fits them, else 16 (two column tiles that share each decoded key
    and value; :func:`token_rows_refusal` bounds it)."""
    return 8 if _token_rows_need(group_pad, longest) <= 8 else TOKEN_ROWS_COLUMNS


def wgmma_applies(rows: int, facts: DeviceFacts) -> bool:
    """Whether a Gluon launch can use Hopper's warpgroup products (``AttentionConfig.wgmma``):
    a tile of 64 query rows (one warpgroup of four warps) on a GPU of compute capability
    9.x (``wgmma`` exists only there)."""
    return rows == 64 and facts.capability[0] == 9


@functools.cache
def _log_token_rows(reason: str) -> None:
    logger.warning("tq_triton: the tuning table asks for the token-rows kernel; it does not apply: %s", reason)


@functools.cache
def _log_portable(reason: str) -> None:
    logger.warning("tq_triton: the tuning table asks for the Gluon kernel; the portable kernel runs: %s", reason)


def table_keys(preset: Preset) -> bool:
    """The portable kernel's ``KEY_LUT``: whether it looks the preset's keys up in
    ``key_lut``'s register table (3- and 4-bit codebook keys, on every device, in plain
    Triton operations; ``Centroids`` is then ``key_lut.lut_words``' table) rather than
    gathering the centroids from memory (5- and 6-bit keys; fp8 keys have none)."""
    return not preset.key_is_fp8 and preset.key_bits in (3, 4)


def wide_key_tables(preset: Preset, head_dim: int) -> bool:
    """The portable kernel's ``WIDE_LUT``: 4-bit codebook keys read their magnitudes from
    ``key_lut``'s table as two 64-bit words (a 64-bit select and shift per code, the sign ORed
    in) rather than byte by byte from its 32-bit words (``key_lut._lookup4_signed``). Everywhere
    but vLLM's 4bit_nc at head_dim 256: on an H100 (Triton 3.6) the 64-bit form took 5-15% less
    time for 4bit_nc, tq_k4v3 and tq_k4v4 on every other bench shape and 6-11% less for the
    calibrated two at head_dim 256, but 12% more for 4bit_nc there, whose decode loop then
    spills (docs/perf/runs/2026-12-07-4bit-lookups)."""
    return preset.calibrated or head_dim <= 128


def poly_keys(preset: Preset, head_dim: int) -> bool:
    """The portable kernel's ``KEY_POLY``: 3-bit codebook keys decoded by ``key_poly``'s fp16
    polynomial, two codes per operation (``Centroids`` is then its constants), where its
    search found constants that give the codebook bit for bit (every shipped 3-bit codebook
    at head_dim 64, 128 and 256)."""
    return cached_poly_coefficients(preset, head_dim, torch.device("cpu")) is not None


def poly_values(preset: Preset, head_dim: int) -> bool:
    """The portable kernel's ``VALUE_POLY``: :func:`poly_keys` for a calibrated format's 3-bit
    Lloyd-Max values (tq_k4v3; ``VCentroids`` is then the polynomial's constants); the
    accumulator's columns come out in ``key_poly.key_columns``' order and are put back
    before the rotation back."""
    return cached_poly_value_coefficients(preset, head_dim, torch.device("cpu")) is not None


def _triton_version() -> tuple[int, int]:
    major, minor = [*triton.__version__.split("."), "0"][:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def transposed_chunks(preset: Preset) -> bool:
    """The portable kernel's ``CHUNKS_T``: load the preset's 3-bit code words as
    ``[D // 32, T]`` and transpose them (``bitpack.load_words``), where the installed Triton
    is 3.6 or older. Those versions lay out the decoded tile of a token-major load with the
    tokens on the lanes, and on sm_90 it reaches the matrix products through a 16-bit
    shared-memory store per element; loaded transposed it does not (on an H100 with Triton
    3.6 the kernel took 4-18% less time for k3v4_nc and 3bit_nc,
    docs/perf/runs/2026-12-07-transposed-chunk-loads). Triton 3.7 to 3.9 already lay the
    token-major load out without those stores, and the transposed load brings them back
    (statically 1-14% more instructions per token)."""
    return 3 in (preset.key_bits, preset.value_bits) and _triton_version() < (3, 7)


def kernel_constexprs(
    preset: Preset,
    fields: dict[str, int],
    cfg: AttentionConfig,
    group: int,
    num_q_heads: int,
    splits: int,
    block_q: int,
    *,
    saturate_query: bool = True,
) -> dict[str, object]:
    """The portable kernel's compile-time arguments for one launch (the Gluon kernel takes
    those of them it has): the launcher passes them, and the Xe2 compile check compiles
    exactly these. ``fields``: ``KernelFields.constexprs()`` of the cache layout;
    ``saturate_query``: not ``DeviceFacts.cast_saturates``."""
    poly = poly_keys(preset, fields["D"])
    vpoly = poly_values(preset, fields["D"])
    return dict(
        G=group,
        G_PAD=next_pow2(group),
        NUM_Q_HEADS=num_q_heads,
        NUM_SPLITS=splits,
        BLOCK_Q=block_q,
        BLOCK_KV=cfg.block_kv,
        **fields,
        NORM_CORRECTION=preset.norm_correction,
        PREFETCH=cfg.prefetch,
        BALANCE=bool(cfg.split_budget) and splits > 1,
        SKIP_EMPTY=bool(cfg.skip_empty) and splits > 1,
        # the prefetch mode stages loads by hand: its loop carries no num_stages
        LOOP_STAGES=None if cfg.prefetch else cfg.num_stages,
        SATURATE_QUERY=saturate_query,
        KEY_LUT=table_keys(preset) and not poly,
        WIDE_LUT=wide_key_tables(preset, fields["D"]),
        CALIBRATED=preset.calibrated,
        INT_VALUES=preset.value_kind == "symmetric",
        VALUE_PAIRS=value_pairs(preset),
        KEY_POLY=poly,
        VALUE_POLY=vpoly,
        CHUNKS_T=transposed_chunks(preset),
    )


def value_pairs(preset: Preset) -> bool:
    """Whether the portable kernel decodes the preset's values two per 32-bit operation
    (``tile.value_pairs``: uniform 4-bit codes, k8v4, k3v4_nc and 4bit_nc), which leaves its
    value product's columns in ``value_words.value_columns`` order: its output stores and
    the split merge then map them back."""
    return not preset.calibrated and preset.value_bits == 4


@dataclass(frozen=True)
class LaunchPlan:
    """What one attention call launches. ``gluon``: the Gluon kernel runs (with Hopper's
    warpgroup products where ``wgmma``), else the portable one; ``key_table``: the
    ``Centroids`` argument is ``key_lut``'s register table (else the fp16 codebook, or a
    placeholder for fp8 keys); ``split_programs``: the programs ``BALANCE`` aims to fill;
    ``options``: launch keywords (``maxnreg``, Intel's ``grf_mode``)."""

    cfg: AttentionConfig
    block_q: int
    splits: int
    gluon: bool
    wgmma: bool
    token_rows: bool
    key_table: bool
    split_programs: int
    constexprs: dict[str, object]
    options: dict[str, Any]
    # the device (``DeviceFacts.name``) the plan was made for; empty: not recorded
    device: str = ""
    # TQ_DEBUG when the plan was made: calls with this plan check metadata values too
    debug: bool = False


def table_config(
    facts: DeviceFacts, preset: Preset, head_dim: int, group_pad: int, longest: int, portable: bool = False
) -> AttentionConfig:
    """The tuned parameters of a launch (``tuning.attention_config_for``), looked up by the
    tile's natural query rows: the padded GQA group times the query tokens per program;
    ``portable``: of a launch of the portable kernel (the table's ``portable`` entries too, the
    vendor kernels off: :func:`portable_config`)."""
    rows = plan_block_q(group_pad, longest) * group_pad
    cfg = attention_config_for(facts.name, preset.name, longest, rows, head_dim, portable)
    return portable_config(cfg) if portable else cfg


def portable_config(cfg: AttentionConfig) -> AttentionConfig:
    """``cfg`` with the vendor kernels switched off: the portable Triton kernel serves the
    launch with the entry's tiles, warps and splits."""
    return replace(cfg, gluon=0, wgmma=0)


def served_by(plan: LaunchPlan) -> str:
    """The kernel a plan launches: ``token_rows``, ``gluon``, ``gluon-wgmma`` or ``portable``
    (the Gluon kernel can still fall back to the portable one at launch where the device
    lacks its shared memory)."""
    if plan.token_rows:
        return "token_rows"
    if plan.gluon:
        return "gluon-wgmma" if plan.wgmma else "gluon"
    return "portable"


def plan_attention(
    facts: DeviceFacts,
    preset: Preset,
    fields: dict[str, int],
    num_q_heads: int,
    num_kv_heads: int,
    num_reqs: int,
    longest: int,
    block_size: int,
    num_kv_splits: int | None = None,
    config: AttentionConfig | None = None,
    portable: bool = False,
) -> LaunchPlan:
    """The plan of one call: ``config`` or the tuned parameters (looked up by the tile's
    natural query rows), the tile padded to their ``min_rows``, the kv splits
    (``num_kv_splits`` or :func:`plan_splits`), the kernel and its compile-time arguments.
    Where the portable kernel serves the call without a ``config``, its parameters are the
    table's with the ``portable`` entries (:func:`table_config`). ``portable``: the portable
    kernel serves the call (``config`` with the vendor kernels off, or those parameters).
    ``fields``: the cache layout's ``KernelFields.constexprs()``; ``longest``: the batch's
    longest q_len (:func:`longest_query`); ``facts``: the device's (``device.device_facts``)."""
    group = num_q_heads // num_kv_heads
    g_pad = next_pow2(group)
    if portable:
        cfg = portable_config(config) if config else table_config(facts, preset, fields["D"], g_pad, longest, True)
    else:
        cfg = config or table_config(facts, preset, fields["D"], g_pad, longest)
    block_q = plan_block_q(g_pad, longest, cfg.min_rows)
    rows = block_q * g_pad
    token_rows = False
    if cfg.gluon == 2 and facts.nvidia:
        why_not = token_rows_refusal(preset, fields["D"], g_pad, cfg.block_kv, block_size, longest) or gluon_refusal(
            preset, fields["D"], 16, cfg.block_kv, block_size, facts
        )
        token_rows = not why_not
        if token_rows:
            rows = token_rows_columns(g_pad, longest)
            block_q = rows // g_pad
        elif debug_enabled():
            _log_token_rows(why_not)
    splits = (
        num_kv_splits if num_kv_splits is not None else plan_splits(cfg, facts.multiprocessors, num_reqs, num_kv_heads)
    )
    gluon = token_rows
    if cfg.gluon and not token_rows:
        why_not = gluon_refusal(preset, fields["D"], rows, cfg.block_kv, block_size, facts)
        gluon = not why_not
        if why_not and debug_enabled():
            _log_portable(why_not)
    if not gluon and not portable and config is None:
        # the portable kernel serves the call: with its own table entries
        args = (facts, preset, fields, num_q_heads, num_kv_heads, num_reqs, longest, block_size, num_kv_splits)
        return plan_attention(*args, portable=True)
    constexprs = kernel_constexprs(
        preset,
        fields,
        cfg,
        group,
        num_q_heads,
        splits,
        block_q,
        saturate_query=not facts.cast_saturates,
    )
    options = launch_options_for(facts.name, facts.type)
    if cfg.max_registers and facts.nvidia:
        options["maxnreg"] = cfg.max_registers
    return LaunchPlan(
        cfg=cfg,
        block_q=block_q,
        splits=splits,
        gluon=gluon,
        wgmma=gluon and not token_rows and bool(cfg.wgmma) and wgmma_applies(rows, facts),
        token_rows=token_rows,
        # the Gluon kernels look codebook keys up in the register table too
        key_table=bool(constexprs["KEY_LUT"]) or gluon,
        split_programs=cfg.split_budget * facts.multiprocessors if cfg.split_budget else 0,
        constexprs=constexprs,
        options=options,
        device=facts.name,
        debug=debug_enabled(),
    )
