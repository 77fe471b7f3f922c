"""Reference attention over tq's paged compressed cache.

Readable rather than fast: per request it decodes the cached keys and values to float32
(exactly the K and V that :func:`tq_core.decode_kv` returns) and runs causal softmax
attention in float32. It is the oracle for every fast implementation and the CPU path.

A request of at most :data:`ROW_BY_ROW` query tokens (decode, speculative verification) is
computed one query row at a time, each row over exactly the positions it sees: the row's
float32 products then have the same shapes as a decode step at that position, so a verified
token's output equals, bit for bit, what decoding it would have given. One product over all
rows rounds differently on hosts whose matrix products depend on the row count (seen on a
CPU with AMX: up to one bf16 step in the output), which vLLM's bf16 model then carries on.
Longer requests (prompt chunks) take one product over their rows.
"""

from __future__ import annotations

import torch

from .calibration import LayerCalibration
from .checks import check_attention_args
from .paged import gather_kv
from .presets import Preset

# the longest q_len computed one row at a time (tq-triton plans tiles for q_len up to 16)
ROW_BY_ROW = 16


def attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    preset: str | Preset,
    scale: float,
    out: torch.Tensor | None = None,
    calibration: LayerCalibration | None = None,
) -> torch.Tensor:
    """Causal attention of each request's newest query tokens over its cached sequence.

    Request ``r`` owns query rows ``query_start_loc[r]:query_start_loc[r+1]`` (``q_len``
    of them) and ``seq_lens[r]`` cached tokens (the new ones included); query ``i`` sits at
    position ``seq_len - q_len + i`` and attends to positions ``<=`` its own. Any q_len
    from 0 to seq_len works. Returns ``out`` (allocated in the query's dtype when None);
    rows past ``query_start_loc[-1]`` are left untouched. A calibrated preset needs the
    layer's ``calibration`` and attends over the keys and values it decodes to.
    """
    args = check_attention_args(
        query, kv_cache, block_table, seq_lens, query_start_loc, preset, scale, out, calibration=calibration
    )
    if out is None:
        out = torch.empty_like(query)
    group = args.num_q_heads // args.num_kv_heads
    sl, qsl = seq_lens.tolist(), query_start_loc.tolist()
    for r in range(args.num_reqs):
        seq_len, q0, q1 = sl[r], qsl[r], qsl[r + 1]
        q_len = q1 - q0
        if q_len == 0:
            continue
        k, v = gather_kv(kv_cache, block_table[r], seq_len, args.preset, args.head_dim, calibration=calibration)
        # [L, Hk, d] -> [Hq, L, d]: q head j reads kv head j // group
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        # scaled before the product sums it (docs/overview.md, "Non-finite inputs"): a finite
        # query whose scores fit float32 cannot overflow on the way to them
        q = query[q0:q1].float().transpose(0, 1) * scale  # [Hq, q_len, d]
        if q_len <= ROW_BY_ROW:
            for i in range(q_len):
                # row i sees positions 0 .. seq_len - q_len + i, as a decode step there does
                # (check_attention_args: q_len <= seq_len)
                seen = seq_len - q_len + i + 1
                s = torch.matmul(q[:, i : i + 1], k[:, :seen].transpose(1, 2))  # [Hq, 1, seen]
                o = torch.matmul(torch.softmax(s, dim=-1), v[:, :seen])  # [Hq, 1, d]
                out[q0 + i] = o[:, 0].to(out.dtype)
            continue
        s = torch.matmul(q, k.transpose(1, 2))  # [Hq, q_len, L]
        pos = torch.arange(seq_len, device=query.device)
        qpos = seq_len - q_len + torch.arange(q_len, device=query.device)
        s = s.masked_fill(pos[None, :] > qpos[:, None], float("-inf"))
        o = torch.matmul(torch.softmax(s, dim=-1), v)  # [Hq, q_len, d]
        out[q0:q1] = o.transpose(0, 1).to(out.dtype)
    return out
