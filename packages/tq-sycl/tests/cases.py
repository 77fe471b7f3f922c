"""tq-sycl's use of tq_core's test kit: paged batches and prepared kernel calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tq_core.contract import check_attention_args
from tq_core.testing import PagedBatch, paged_batch
from tq_sycl import kernel_args


def make_case(
    gen: torch.Generator, preset: str, *, seq_lens: Sequence[int], q_lens: Sequence[int], **kw: Any
) -> PagedBatch:
    """A :func:`tq_core.testing.paged_batch` whose unused block-table entries name real
    blocks, so only masking by seq_len keeps them out of the result."""
    return paged_batch(gen, preset, seq_lens, q_lens, unused="real", **kw)


def prepared(
    case: PagedBatch, out: torch.Tensor | None = None, num_splits: int = 1, *, check_values: bool | None = None
) -> kernel_args.PreparedCall:
    """The kernel argument dict of ``case`` (validated once, as tq_sycl.attention does)."""
    q, kv, bt, sl, qsl, preset, scale = case.args()
    values = kernel_args.checks_values(q) if check_values is None else check_values
    checked = check_attention_args(q, kv, bt, sl, qsl, preset, scale, out, check_values=values, **case.extra())
    return kernel_args.prepare(checked, q, kv, bt, sl, qsl, scale, out, num_splits, case.calibration)


def randint(gen: torch.Generator, lo: int, hi: int) -> int:
    """A uniform int in ``[lo, hi]``."""
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))
