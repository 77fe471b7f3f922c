"""Backend selection and the two attention paths the vLLM backend runs (pure torch, no vLLM).

- :func:`select_kernels`: the tq backend (:class:`tq_core.contract.Backend`) for a device,
  found through tq-core's registry: tq-triton on cuda/xpu, tq-core on CPU, or the one
  ``TQ_VLLM_IMPL`` names.
- :func:`query_len_limit`: the longest q_len per (sub-)request tq-vllm hands that backend
  in one attention call (tq-vllm's policy on top of the backend's own limit).
- :func:`run_decode`: the one ``attention`` call of a :class:`~tq_vllm.plan.DecodePlan`.
- :func:`run_chunk`: a prompt chunk attends to its own K/V un-quantized and to the
  dequantized cached prefix (standard causal softmax attention, torch SDPA).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tq_core import BackendUnavailableError, LayerCalibration, Preset
from tq_core.contract import Backend, debug_enabled, gather_kv, load_backend, select_backend

from . import _env
from .plan import BatchPlan, ChunkPlan, DecodePlan

GPU_DEVICE_TYPES = ("cuda", "xpu")
# Used only when tq-triton cannot load here (its backend's max_query_len is the fact).
TRITON_MAX_Q_LEN_FALLBACK = 16

INSTALL_HINT = (
    "Install it (pip install tq-triton, or pip install 'tq-vllm[triton]'), set TQ_VLLM_IMPL=core for "
    "tq-core's slow reference path, or TQ_VLLM_DISABLE=1 for vLLM's own TurboQuant backend"
)


def select_kernels(device: torch.device | str, choice: str | None = None) -> Backend:
    """The backend for ``device``; ``choice`` is ``auto`` / ``triton`` / ``core`` (default: TQ_VLLM_IMPL).

    ``auto`` takes tq-core's automatic choice for the device type, but never falls back
    to tq-core's reference path on cuda/xpu: there it raises
    :class:`~tq_core.BackendUnavailableError` saying how to install tq-triton.
    """
    dev = torch.device(device).type
    choice = choice or _env.impl_choice()
    if choice not in _env.IMPL_CHOICES:
        raise ValueError(f"kernel choice {choice!r}: expected one of {_env.IMPL_CHOICES}")
    if choice == "triton" and dev not in GPU_DEVICE_TYPES and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailableError(
            f"TQ_VLLM_IMPL=triton on device type {dev!r}: tq-triton runs on cuda and xpu, "
            "or on CPU under TRITON_INTERPRET=1 (set before start-up)"
        )
    try:
        backend, skipped = select_backend(device, choice)
    except BackendUnavailableError as e:
        raise BackendUnavailableError(
            f"tq-vllm runs turboquant_* attention on {dev} with tq-triton, which is not usable here ({e}). "
            + INSTALL_HINT
        ) from e
    if choice == "auto" and dev in GPU_DEVICE_TYPES and backend.name == "core":
        why = "; ".join(skipped) or "no tq backend for this device is installed"
        raise BackendUnavailableError(
            f"tq-vllm runs turboquant_* attention on {dev} with tq-triton, which is not usable here ({why}). "
            + INSTALL_HINT
        )
    return backend


def query_len_limit(backend: Backend) -> int | None:
    """The longest q_len of a (sub-)request in one attention call of ``backend`` (None: any).

    tq-core gets one query per sub-request: its float32 matmuls round differently for
    different q_len, so verify rows are fed as q_len=1 pieces (with their causal seq_len)
    and reproduce plain decoding bit for bit. Still one attention call.
    """
    return 1 if backend.name == "core" else backend.max_query_len


def triton_query_len_limit() -> int | None:
    """tq-triton's longest q_len per request in one call (the CUDA-graph decision uses it)."""
    try:
        return load_backend("triton").max_query_len
    except BackendUnavailableError:
        return TRITON_MAX_Q_LEN_FALLBACK


def tq_cache_view(kv_cache: torch.Tensor) -> torch.Tensor:
    """vLLM's per-layer view ``[num_blocks, num_kv_heads, block_size, slot]`` as tq's
    ``[num_blocks, block_size, num_kv_heads, slot]`` (a view; the block bytes are tq's)."""
    return kv_cache.transpose(1, 2)


@dataclass(frozen=True)
class LayerStep:
    """One layer's inputs and output for one engine step.

    ``query``/``output`` ``[num_tokens, Hq, d]``; ``key``/``value`` ``[num_tokens, Hk, d]``
    (the step's new, un-quantized K/V; needed only for prompt chunks); ``kv_cache`` in
    tq's view (see :func:`tq_cache_view`); ``block_table`` vLLM's, one row per request;
    ``calibration`` the layer's, for a calibrated format (tq_vllm.calibrated); ``launch_plans``
    the step's launch plans by call geometry, shared by every layer of the step (the backend's
    ``plan_attention`` runs once per step and geometry, see :func:`run_decode`).
    """

    query: torch.Tensor
    key: torch.Tensor | None
    value: torch.Tensor | None
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    preset: Preset
    scale: float
    output: torch.Tensor
    calibration: LayerCalibration | None = None
    launch_plans: dict | None = None


def _launch_plan(backend: Backend, plan: DecodePlan, step: LayerStep, query: torch.Tensor) -> object | None:
    """The step's launch plan for this call's geometry, made by the backend's ``plan_attention``
    at the step's first layer of that geometry and reused by the others; None where the
    backend plans each call itself or the step keeps no plans."""
    if backend.plan_attention is None or step.launch_plans is None:
        return None
    key = (
        backend.name,
        str(query.device),
        tuple(query.shape[1:]),
        tuple(step.kv_cache.shape[1:]),
        step.preset.name,
        plan.num_reqs,
        plan.max_q_len,
    )
    made = step.launch_plans.get(key)
    if made is None:
        made = step.launch_plans[key] = backend.plan_attention(
            query, step.kv_cache, plan.num_reqs, step.preset, plan.max_q_len
        )
    return made


def run_decode(backend: Backend, plan: DecodePlan, step: LayerStep) -> None:
    """One ``attention`` call for every decode/verify request of the batch."""
    kw: dict = {"max_query_len": plan.max_q_len} if backend.takes_max_query_len else {}
    if step.calibration is not None:
        kw["calibration"] = step.calibration
    query, output = step.query, step.output
    launch = _launch_plan(backend, plan, step, query)
    if launch is not None:
        kw["plan"] = launch
    if plan.token_index is None:
        n = plan.num_tokens
        backend.attention(
            query[:n],
            step.kv_cache,
            plan.block_table,
            plan.seq_lens,
            plan.query_start_loc,
            step.preset,
            step.scale,
            out=output[:n],
            **kw,
        )
        return
    q = query.index_select(0, plan.token_index)
    o = backend.attention(
        q, step.kv_cache, plan.block_table, plan.seq_lens, plan.query_start_loc, step.preset, step.scale, **kw
    )
    output.index_copy_(0, plan.token_index, o.to(output.dtype))


def run_chunk(chunk: ChunkPlan, step: LayerStep) -> None:
    """Causal attention of one prompt chunk: raw K/V of its own tokens, dequantized cached prefix."""
    if step.key is None or step.value is None:
        raise ValueError("prompt chunks need the step's key and value")
    query, output = step.query, step.output
    a, b = chunk.q_start, chunk.q_end
    q_len, ctx = chunk.q_len, chunk.context_len
    hq, d = query.shape[1], query.shape[2]
    hk = step.key.shape[1]
    # CPU: float32 throughout; GPUs: the model dtype, for the fused SDPA kernels
    cdt = torch.float32 if query.device.type == "cpu" else query.dtype
    k, v = step.key[a:b].to(cdt), step.value[a:b].to(cdt)
    if ctx > 0:
        kp, vp = gather_kv(
            step.kv_cache,
            step.block_table[chunk.req],
            ctx,
            step.preset,
            d,
            check_values=debug_enabled(),
            calibration=step.calibration,
        )
        k = torch.cat([kp.to(cdt), k])
        v = torch.cat([vp.to(cdt), v])
    group = hq // hk
    q = query[a:b].to(cdt).transpose(0, 1)  # [Hq, q_len, d]
    k = k.transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, S, d]
    v = v.transpose(0, 1).repeat_interleave(group, dim=0)
    qpos = ctx + torch.arange(q_len, device=query.device)
    kpos = torch.arange(ctx + q_len, device=query.device)
    mask = kpos[None, :] <= qpos[:, None]
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=step.scale)
    output[a:b] = o.transpose(0, 1).to(output.dtype)


def run_batch(backend: Backend, plan: BatchPlan, step: LayerStep) -> None:
    """Attention for a whole planned batch: the decode call, then each prompt chunk."""
    if plan.decode is not None:
        run_decode(backend, plan.decode, step)
    for chunk in plan.chunks:
        run_chunk(chunk, step)
