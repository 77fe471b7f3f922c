"""Plain causal softmax attention in float64 over dense keys and values.

Written without tq's codec, layout or kernels, so it can judge all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def dense_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    seq_lens: Sequence[int],
    q_lens: Sequence[int],
    scale: float,
) -> torch.Tensor:
    """float64 ``[sum(q_lens), Hq, d]`` attention over dense K/V ``[sum(seq_lens), Hk, d]``.

    Request ``r`` owns ``seq_lens[r]`` consecutive K/V rows and ``q_lens[r]`` consecutive
    query rows; its query ``i`` sits at position ``seq_len - q_len + i`` and sees positions
    ``<=`` its own. Query head ``j`` reads kv head ``j // (Hq // Hk)``. Runs on the CPU.
    """
    hq, hk = query.shape[1], key.shape[1]
    if hq % hk:
        raise ValueError(f"query has {hq} heads, not a multiple of the {hk} kv heads")
    if len(seq_lens) != len(q_lens):
        raise ValueError(f"{len(seq_lens)} seq_lens but {len(q_lens)} q_lens")
    kv_of = torch.arange(hq) // (hq // hk)
    q_all, k_all, v_all = (t.detach().to("cpu", torch.float64) for t in (query, key, value))
    out = torch.zeros(sum(q_lens), hq, query.shape[2], dtype=torch.float64)
    t0 = q0 = 0
    for s, ql in zip(seq_lens, q_lens, strict=True):
        if ql > s:
            raise ValueError(f"q_len {ql} exceeds seq_len {s}")
        k = k_all[t0 : t0 + s][:, kv_of]  # [s, Hq, d]
        v = v_all[t0 : t0 + s][:, kv_of]
        for i in range(ql):
            p = s - ql + i
            logits = torch.einsum("hd,lhd->hl", q_all[q0 + i], k[: p + 1]) * scale
            out[q0 + i] = torch.einsum("hl,lhd->hd", torch.softmax(logits, dim=-1), v[: p + 1])
        t0, q0 = t0 + s, q0 + ql
    return out
