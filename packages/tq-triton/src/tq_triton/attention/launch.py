"""``attention``: checks the arguments, plans the launch (``plan``), runs the kernels."""

from __future__ import annotations

import math
import numbers

import torch

from tq_core import LayerCalibration, Preset, RangeError, ShapeError, get_preset
from tq_core.contract import check_attention_args, debug_enabled

from ..device import device_facts
from ..device_tensors import (
    cached_codebook,
    cached_lut_table,
    cached_poly_coefficients,
    cached_poly_value_coefficients,
    cached_value_codebook,
    cached_value_lut_table,
    dummy,
)
from ..nvidia.gluon_launch import launch_gluon, launch_token_rows
from ..tuning import AttentionConfig
from .kernel import MERGE_WARPS, attention_kernel, merge_kernel
from .plan import MAX_BLOCK_M, LaunchPlan, longest_query, next_pow2, plan_attention

LOG2E = 1.4426950408889634
# log2 of the headroom above fp16's largest number that the query keeps in the fp16
# product: finite scaled query elements up to 65504 * 2^8 are exact (up to fp16 rounding;
# elements below 2^-6 keep fp16's subnormal step, 2^-24 * 2^8, as absolute precision)
QUERY_HEADROOM_LOG2 = 8


def query_scaling(scale: float) -> tuple[float, float]:
    """``(q_mul, q_scale)`` for the attention kernel: the fp16 product sees the query times
    ``q_mul = scale * log2(e) / q_scale`` and the scores are multiplied back by
    ``q_scale``, a power of two, so that both products are exact in float32. ``q_scale``
    is ``2^8`` for scales below ``1 / log2(e)`` and grows with larger scales (up to 2^126),
    so any finite ``scale`` keeps the query's ordinary range. Host arithmetic only: the
    kernel reads both as launch arguments."""
    s = float(scale) * LOG2E
    _, exp = math.frexp(s)  # s = m * 2^exp with 0.5 <= m < 1
    k = min(max(exp, 0) + QUERY_HEADROOM_LOG2, 126)
    q_scale = math.ldexp(1.0, k)
    return s / q_scale, q_scale


# The kernel rounds the scaled query toward zero into fp16, which shrinks an element by half
# a unit in its last place on average: 2^-11 / m of its magnitude for mantissa m in [1, 2),
# 2^-12 / ln 2 averaged over log-uniform mantissas. q_mul is that much larger, so that the
# scores carry no systematic bias.
RTZ_UNBIAS = 1.0 + 2.0**-12 / math.log(2.0)


def attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    preset: str | Preset,
    scale: float,
    out: torch.Tensor | None = None,
    *,
    max_query_len: int | None = None,
    num_kv_splits: int | None = None,
    config: AttentionConfig | None = None,
    calibration: LayerCalibration | None = None,
    plan: LaunchPlan | None = None,
) -> torch.Tensor:
    """Causal attention of each request's newest query tokens over its paged compressed cache.

    Same contract as ``tq_core.attention``. ``max_query_len`` (the longest q_len in the
    batch, known to vLLM on the host; None or an int >= 0) picks the tile shape; it is a
    hint, any q_len is computed correctly. ``num_kv_splits`` (None or an int >= 1) and
    ``config`` override the tuning table for this call (``tq sweep`` uses them).

    ``plan``: a launch plan made once for every call of a step (:func:`attention_plan`, which
    vLLM's plugin calls once per step and kv-cache geometry); the call then only checks and
    launches: no tuning lookup, no environment read (``TQ_DEBUG`` as it was when the plan
    was made). It must have been made for this device and for the query's and cache's
    shapes (else ``ShapeError``); ``max_query_len``, ``num_kv_splits`` and ``config`` are
    then not read.

    ``block_table``, ``seq_lens`` and ``query_start_loc`` are read through their strides.
    Their values are not checked on the host unless ``TQ_DEBUG=1`` (then tq_core's checks
    raise ``RangeError``, at the cost of a host sync). Without it, no value can make the
    kernels read or write outside their tensors, and an invalid value gives this result:

    - a block id outside ``[0, num_blocks)`` (at a position below its request's seq_len)
      is read as the cache's last block: nothing outside the cache is read, and that
      request's result is unspecified (the last block's keys and values stand in);
    - a negative seq_len counts as 0; one past the block table's capacity
      (``block_table.shape[1] * block_size``) as that capacity;
    - ``query_start_loc``: ``rows = query_start_loc[num_reqs]`` is clamped to
      ``[0, num_query_tokens]``; request ``r`` owns rows ``[start, end)`` with ``start``
      = ``query_start_loc[r]`` clamped to ``[0, rows]`` and ``end`` =
      ``query_start_loc[r + 1]`` clamped to ``[start, rows]``. Rows from ``rows`` on are
      never written. Requests whose (non-monotone) ranges overlap write the shared rows
      in an undefined order; with kv splits, a row below ``rows`` that no request owns
      holds unspecified values (with one split it is not written);
    - q_len > seq_len: row ``i`` of the request sits at position ``seq_len - q_len + i``;
      rows at negative positions see no key and are written as 0.

    A request whose metadata is valid gets tq_core's result whatever the other requests
    hold (as long as their rows do not overlap its own).

    A calibrated format (``tq_k4v3``, ``tq_k4v4``, ``tq_k6v5``) needs the layer's
    ``calibration`` (on the cache's device), as ``tq_core.attention`` does; position 0 is
    each request's first cached token.

    Numerics: the query enters an fp16 matrix product, scaled by powers of two chosen from
    ``scale`` alone (:func:`query_scaling`), so any finite ``scale`` and queries up to
    about ``65504 * 2^8`` per element of ``scale * log2(e) * query`` (rotated, for
    Lloyd-Max keys) are computed as tq_core does, up to fp16 rounding (toward zero, with
    its mean bias compensated: ``RTZ_UNBIAS``). Larger finite elements saturate: the
    result stays finite but differs from tq_core's. For a calibrated format the query is
    divided by the key gain first (what the fp16 product then sees). A NaN or ±inf query
    element makes its own (row, q head) NaN and nothing else.
    """
    args = check_attention_args(
        query,
        kv_cache,
        block_table,
        seq_lens,
        query_start_loc,
        preset,
        scale,
        out,
        check_values=debug_enabled() if plan is None else plan.debug,
        calibration=calibration,
    )
    max_query_len, num_kv_splits = _check_hints(max_query_len, num_kv_splits)
    # raises where Triton cannot run kernels on the device (even for an empty batch)
    facts = device_facts(query.device)
    nq, hq, d = query.shape
    hk = args.num_kv_heads
    group = hq // hk
    if next_pow2(group) > MAX_BLOCK_M:
        raise ShapeError(
            f"query: {hq} q heads over {hk} kv heads is {group} per kv head; tq_triton supports at most {MAX_BLOCK_M}"
        )
    if out is None:
        out = torch.empty_like(query)
    if args.num_reqs == 0 or nq == 0:
        return out
    if query.stride(2) != 1:
        query = query.contiguous()
    dev = query.device
    p = args.preset
    if plan is None:
        plan = plan_attention(
            facts,
            p,
            args.fields.constexprs(),
            hq,
            hk,
            args.num_reqs,
            longest_query(nq, args.num_reqs, max_query_len),
            kv_cache.shape[1],
            num_kv_splits,
            config,
        )
    else:
        _check_plan(plan, facts.name, args.fields.constexprs(), p, hq, group)
    if plan.splits > 1:
        # per call from torch's caching allocator: no host sync, safe under CUDA-graph
        # capture, and never shared by calls on other threads or streams
        partial = torch.empty(nq * hq * plan.splits * d, dtype=torch.float32, device=dev)
        lse = torch.empty(nq * hq * plan.splits, dtype=torch.float32, device=dev)
    else:
        partial = lse = dummy(dev)
    grid = (args.num_reqs, hk, plan.splits)
    # the arguments after Centroids, up to the calibration's
    tail_args = (
        out,
        partial,
        lse,
        *_kernel_query_scaling(scale),
        nq,
        kv_cache.shape[0] - 1,
        block_table.shape[1] * kv_cache.shape[1],
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        kv_cache.stride(0),
        block_table.stride(0),
        block_table.stride(1),
        seq_lens.stride(0),
        query_start_loc.stride(0),
        plan.split_programs,
    )

    def kernel_args(key_table: bool, value_table: bool, key_poly: bool = False, value_poly: bool = False) -> tuple:
        """Every kernel's positional arguments; ``key_table`` / ``value_table``: the key and
        value codebooks as ``key_lut``'s register tables (the Gluon kernels always, the
        portable one its keys where its ``KEY_LUT`` asks for them); ``key_poly`` /
        ``value_poly``: as ``key_poly``'s constants (the portable kernel's ``KEY_POLY`` /
        ``VALUE_POLY``)."""
        head = (query, kv_cache, block_table, seq_lens, query_start_loc, _centroids(p, d, dev, key_table, key_poly))
        return (*head, *tail_args, *_calibration_args(p, calibration, d, dev, value_table, value_poly))

    cx = plan.constexprs
    if plan.token_rows:
        launch_token_rows(grid, kernel_args(True, True), cx, plan.options)
    # False where the Gluon kernel needs more shared memory than the device has: the
    # portable kernel then runs
    gluon = plan.token_rows or (
        plan.gluon and launch_gluon(grid, kernel_args(True, True), cx, plan.options, wgmma=plan.wgmma)
    )
    if not gluon:
        attention_kernel[grid](
            *kernel_args(bool(cx["KEY_LUT"]), False, bool(cx["KEY_POLY"]), bool(cx["VALUE_POLY"])),
            **cx,
            num_warps=plan.cfg.num_warps,
            **plan.options,
        )
    if plan.splits > 1:
        merge_kernel[(nq, hq)](
            partial,
            lse,
            out,
            query_start_loc,
            args.num_reqs,
            query_start_loc.stride(0),
            out.stride(0),
            out.stride(1),
            NUM_Q_HEADS=hq,
            NUM_SPLITS=plan.splits,
            SPLITS_PAD=next_pow2(plan.splits),
            D=d,
            # the Gluon kernel and the portable one with VALUE_PAIRS keep uniform values'
            # columns in value_words order; calibrated formats' outputs are rotated back in the
            # kernel, in head_dim order, and the token-rows kernel stores head_dim order
            VALUE_COLUMNS=(gluon and not p.calibrated and not plan.token_rows)
            or (not gluon and bool(cx["VALUE_PAIRS"])),
            SKIP_EMPTY=cx["SKIP_EMPTY"],
            num_warps=MERGE_WARPS,
        )
    return out


def attention_plan(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    num_reqs: int,
    preset: str | Preset,
    max_query_len: int | None = None,
    num_kv_splits: int | None = None,
    config: AttentionConfig | None = None,
    portable: bool = False,
) -> LaunchPlan:
    """The launch plan of :func:`attention` calls with this query's and cache's shapes, this many
    requests and this longest q_len (the hints as :func:`attention` takes them), made once and
    passed to each call as ``plan=``: the tuning lookup, the environment's overrides and the
    kernel choice happen here, not per call. Reads shapes only, never tensor values.
    ``portable``: the portable Triton kernel serves the calls whatever the table asks for
    (``plan.plan_attention``)."""
    p = get_preset(preset)
    if query.ndim != 3 or kv_cache.ndim != 4:
        raise ShapeError(
            f"attention_plan: query [tokens, q_heads, head_dim] and kv_cache [blocks, block_size, kv_heads, slot],"
            f" got {tuple(query.shape)} and {tuple(kv_cache.shape)}"
        )
    if isinstance(num_reqs, bool) or not isinstance(num_reqs, numbers.Integral) or num_reqs < 0:
        raise RangeError(f"num_reqs={num_reqs!r}: expected an int >= 0")
    max_query_len, num_kv_splits = _check_hints(max_query_len, num_kv_splits)
    nq, hq, d = query.shape
    _, block_size, hk, _ = kv_cache.shape
    if hk <= 0 or hq % hk:
        raise ShapeError(f"query: {hq} q heads is not a multiple of the cache's {hk} kv heads")
    fields = p.kernel_fields(p.block_layout(d, block_size, hk)).constexprs()
    reqs = max(1, int(num_reqs))
    longest = longest_query(nq, reqs, max_query_len)
    return plan_attention(
        device_facts(query.device), p, fields, hq, hk, reqs, longest, block_size, num_kv_splits, config, portable
    )


def _check_plan(plan: LaunchPlan, device: str, fields: dict[str, int], preset: Preset, hq: int, group: int) -> None:
    """ShapeError where ``plan`` was made for another device, preset or shapes than the call's."""
    cx = plan.constexprs
    made = {k: cx.get(k) for k in fields}
    made |= {"NUM_Q_HEADS": cx.get("NUM_Q_HEADS"), "G": cx.get("G"), "CALIBRATED": cx.get("CALIBRATED")}
    want = dict(fields) | {"NUM_Q_HEADS": hq, "G": group, "CALIBRATED": preset.calibrated}
    if plan.device and plan.device != device:
        raise ShapeError(f"plan= was made for device {plan.device!r}, the call runs on {device!r}")
    if made != want:
        diff = ", ".join(f"{k} {made[k]} (plan) vs {want[k]} (call)" for k in want if made[k] != want[k])
        raise ShapeError(f"plan= was made for other shapes or another preset than the call's: {diff}")


def _centroids(preset: Preset, head_dim: int, device: torch.device, table: bool, poly: bool) -> torch.Tensor:
    """The kernels' ``Centroids`` argument: a placeholder for fp8 keys, else ``key_poly``'s
    constants (``poly``), ``key_lut``'s register table (``table``) or the fp16 codebook."""
    if preset.key_is_fp8:
        return dummy(device)
    if poly:
        return cached_poly_coefficients(preset, head_dim, device)
    return cached_lut_table(preset, head_dim, device) if table else cached_codebook(preset, head_dim, device)[2]


def _calibration_args(
    preset: Preset, calibration: LayerCalibration | None, head_dim: int, device: torch.device, table: bool, poly: bool
) -> tuple[torch.Tensor, ...]:
    """The portable kernel's calibration pointers (key gain, offset, first offset; the same for
    values) and the value codebook (``key_poly``'s constants where ``poly``, ``key_lut``'s
    register table where ``table``, else the fp16 codebook): placeholders for vLLM's presets."""
    if not preset.calibrated:
        return (dummy(device),) * 7
    assert calibration is not None  # check_attention_args requires it
    if poly:
        values = cached_poly_value_coefficients(preset, head_dim, device)
    elif table:
        values = cached_value_lut_table(preset, head_dim, device)
    else:
        values = cached_value_codebook(preset, head_dim, device)[1]
    return (*calibration.kernel_vectors(), values)


def _kernel_query_scaling(scale: float) -> tuple[float, float]:
    """:func:`query_scaling` with q_mul compensated for the cast's rounding toward zero."""
    q_mul, q_scale = query_scaling(scale)
    return q_mul * RTZ_UNBIAS, q_scale


def _check_hints(max_query_len: object, num_kv_splits: object) -> tuple[int | None, int | None]:
    """``max_query_len``: None or an int >= 0; ``num_kv_splits``: None or an int >= 1 (no
    bools). Returns them as Python ints."""
    checked = []
    for name, value, low in (("max_query_len", max_query_len, 0), ("num_kv_splits", num_kv_splits, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low):
            raise RangeError(f"{name}={value!r}: expected None or an int >= {low}")
        checked.append(None if value is None else int(value))
    return checked[0], checked[1]
