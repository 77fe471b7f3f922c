"""The bf16 baselines of ``tq bench`` compute the attention they are timed for: every
candidate ``bench.bf16_candidates`` offers that runs here matches a float64 causal
attention over the case's dense K/V, on uniform decode and verify shapes and a ragged
batch (the unmasked "packed rows" lower bound on the rows that see every key)."""

from __future__ import annotations

import pytest
import torch

from tq_triton import bench


def reference(case: bench.Case) -> torch.Tensor:
    """float64 attention of each request's query rows (bottom-right causal) over its dense K/V."""
    sh = case.shape
    g = sh.q_heads // sh.kv_heads
    rows, start = [], 0
    for r, (ql, sl) in enumerate(zip(sh.request_q_lens(), sh.request_seq_lens(), strict=True)):
        q = case.query[start : start + ql].double().cpu()  # [ql, Hq, D]
        k = case.dense_k[r, :, :sl].double().cpu().repeat_interleave(g, dim=0)  # [Hq, sl, D]
        v = case.dense_v[r, :, :sl].double().cpu().repeat_interleave(g, dim=0)
        s = torch.einsum("qhd,hkd->hqk", q, k) * case.scale
        pos = torch.arange(sl)[None, :] <= (sl - ql + torch.arange(ql))[:, None]  # [ql, sl]
        s = s.masked_fill(~pos[None], float("-inf"))
        rows.append(torch.einsum("hqk,hkd->qhd", s.softmax(-1), v))
        start += ql
    return torch.cat(rows)


SHAPES = [
    bench.Shape("verify-small", batch=2, q_heads=8, kv_heads=2, head_dim=64, seq_len=40, q_len=4),
    bench.Shape("decode-small", batch=3, q_heads=8, kv_heads=2, head_dim=64, seq_len=33, q_len=1),
    bench.Shape(
        "ragged-small",
        batch=3,
        q_heads=8,
        kv_heads=2,
        head_dim=64,
        seq_len=48,
        q_lens=(1, 5, 2),
        seq_lens=(48, 17, 30),
    ),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_every_bf16_candidate_computes_the_case(shape, device):
    case = bench.build_case(shape, "turboquant_k8v4", torch.device(device), dense=True)
    want = reference(case)
    ran = []
    for label, fn, rows in bench.bf16_candidates(case):
        try:
            got = rows(fn())
        except RuntimeError:  # a backend that refuses this device, shape, GQA or mask
            continue
        ran.append(label)
        assert got.shape == case.query.shape, label
        got, ref = got.double().cpu(), want
        if "lower bound" in label:
            # unmasked: only each request's last query row, which sees every key, is exact
            last = torch.tensor(shape.request_q_lens()).cumsum(0) - 1
            got, ref = got[last], ref[last]
        torch.testing.assert_close(got, ref, atol=2e-2, rtol=2e-2, msg=lambda m, label=label: f"{label}: {m}")
    assert any("math" in label for label in ran), f"the math backend should run everywhere: {ran}"
    if shape.q_lens and case.query.is_cuda and hasattr(torch.ops.aten, "_flash_attention_forward"):
        assert "flash-varlen" in ran, ran  # the one-call ragged baseline must not fail silently
