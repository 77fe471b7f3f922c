"""tq-triton's test helpers over tq-core's kit (named apart from other suites' helpers so that
several suites can run in one pytest process)."""

from __future__ import annotations

import os

import torch

import tq_core
import tq_triton
from tq_core.testing import PagedBatch, assert_attention_close, paged_batch

ON_GPU = os.environ.get("TQ_TEST_DEVICE", "cpu") != "cpu"
# fp16 operands in both products: the largest error stays near 1e-3 of the output's scale
TOL = 1e-2


def make_batch(
    gen: torch.Generator,
    preset: str,
    seq_lens: list[int],
    q_lens: list[int],
    *,
    device: torch.device,
    dtype: torch.dtype = torch.bfloat16,
    **shape: int,
) -> PagedBatch:
    """The kit's paged batch on ``device``, filled by ``tq_core.store`` (the reference store)."""
    return paged_batch(gen, preset, seq_lens, q_lens, device=device, dtype=dtype, store=tq_core.store, **shape)


def reference(b: PagedBatch) -> torch.Tensor:
    """``tq_core.attention`` of the batch with a float32 query (float32 output)."""
    return tq_core.attention(b.query.float(), *b.args()[1:], **b.extra())


def run_triton(
    b: PagedBatch,
    *,
    splits: int | None = None,
    out_dtype: torch.dtype | None = None,
    max_query_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tq_triton.attention into a NaN-filled ``out``, the reference) for the batch."""
    out = torch.full_like(b.query, float("nan"), dtype=out_dtype or b.query.dtype)
    res = tq_triton.attention(
        *b.args(),
        out=out,
        max_query_len=b.max_query_len if max_query_len is None else max_query_len,
        num_kv_splits=splits,
        **b.extra(),
    )
    assert res is out
    return out, reference(b)


def assert_close(out: torch.Tensor, ref: torch.Tensor, rows: int | None = None) -> None:
    """The first ``rows`` rows (all by default) of ``out`` match the reference within :data:`TOL`
    (NaN, from an unwritten row or a broken merge, always fails)."""
    rows = out.shape[0] if rows is None else rows
    assert_attention_close(out[:rows].float(), ref[:rows].float(), tol=TOL, what="tq_triton.attention")
