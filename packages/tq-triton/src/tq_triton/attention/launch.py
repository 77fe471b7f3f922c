"""``attention``: checks the arguments, plans the launch, runs the kernels."""

from __future__ import annotations

import torch

from tq_core import Preset
from tq_core.contract import check_attention_args, debug_enabled

from ..device import check_runnable
from ..device_tensors import codebook, dummy
from ..tuning import AttentionConfig, launch_options, register_cap
from ..workspace import buffer
from .kernel import attention_kernel, merge_kernel
from .plan import MAX_BLOCK_M, longest_query, next_pow2, plan_block_q, plan_config, plan_splits

LOG2E = 1.4426950408889634


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
) -> torch.Tensor:
    """Causal attention of each request's newest query tokens over its paged compressed cache.

    Same contract as ``tq_core.attention``. ``max_query_len`` (the longest q_len in the
    batch, known to vLLM on the host) picks the tile shape; it is a hint, any q_len is
    computed correctly. ``num_kv_splits`` / ``config`` override the tuning table for this
    call (``tq sweep`` uses them).
    """
    args = check_attention_args(
        query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale, out, check_values=debug_enabled()
    )
    check_runnable(query.device)
    if out is None:
        out = torch.empty_like(query)
    nq, hq, d = query.shape
    if args.num_reqs == 0 or nq == 0:
        return out
    if query.stride(2) != 1:
        query = query.contiguous()
    p = args.preset
    hk = args.num_kv_heads
    group = hq // hk
    g_pad = next_pow2(group)
    if g_pad > MAX_BLOCK_M:
        raise ValueError(f"query: {group} q heads per kv head is more than tq_triton supports ({MAX_BLOCK_M})")
    longest = longest_query(nq, args.num_reqs, max_query_len)
    block_q = plan_block_q(g_pad, longest)
    cfg = config or plan_config(query.device, p.name, longest)
    splits = num_kv_splits or plan_splits(cfg, query.device, args.num_reqs, hk)
    dev = query.device
    cent = dummy(dev) if p.key_is_fp8 else codebook(p, d, dev)[2]
    if splits > 1:
        partial = buffer(dev, "partial", nq * hq * splits * d)
        lse = buffer(dev, "lse", nq * hq * splits)
    else:
        partial = lse = dummy(dev)
    attention_kernel[(args.num_reqs, hk, splits)](
        query,
        kv_cache,
        block_table,
        seq_lens,
        query_start_loc,
        cent,
        out,
        partial,
        lse,
        float(scale) * LOG2E,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        kv_cache.stride(0),
        block_table.stride(0),
        G=group,
        G_PAD=g_pad,
        NUM_Q_HEADS=hq,
        NUM_SPLITS=splits,
        BLOCK_Q=block_q,
        BLOCK_KV=cfg.block_kv,
        **args.fields.constexprs(),
        NORM_CORRECTION=p.norm_correction,
        PREFETCH=cfg.prefetch,
        # the prefetch mode stages loads by hand: its loop carries no num_stages
        LOOP_STAGES=None if cfg.prefetch else cfg.num_stages,
        VALUE_ACC=cfg.value_acc,
        num_warps=cfg.num_warps,
        **launch_options(dev),
        **register_cap(dev, cfg.max_registers),
    )
    if splits > 1:
        merge_kernel[(nq, hq)](
            partial,
            lse,
            out,
            query_start_loc,
            args.num_reqs,
            out.stride(0),
            out.stride(1),
            NUM_Q_HEADS=hq,
            NUM_SPLITS=splits,
            SPLITS_PAD=next_pow2(splits),
            D=d,
            num_warps=4,
        )
    return out
