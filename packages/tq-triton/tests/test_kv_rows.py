"""The portable kernel's experimental ``KV_ROWS`` orientation (tile's tokens on the matrix unit's
rows, ``attention.tile.attend_tile_kv_rows``) against tq_core.attention, the reference.

No plan sets ``KV_ROWS`` yet: each test makes the portable kernel's launch plan
(``attention_plan(..., portable=True)``) and launches it with ``KV_ROWS`` switched on in its
compile-time arguments. Every batch mixes a decode request with a q_len-4 request, so that
one launch covers both; the cases spread the formats' decode paths (fp8 keys, 3- and
4-bit table keys, 6-bit gathered keys; uniform 3- and 4-bit values, the latter in
``VALUE_PAIRS`` order; the calibrated formats' table, gathered and ``INT_VALUES`` values; norm
correction) over GQA groups 1, 4 and 8, with and without kv splits.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from tqt_helpers import assert_close, make_batch, reference

import tq_triton
from tq_core.testing import PagedBatch
from tq_triton.attention.kernel import attention_kernel
from tq_triton.attention.launch import attention_plan
from tq_triton.attention.plan import LaunchPlan, served_by
from tq_triton.attention.tile import attend_tile
from tq_triton.tuning import AttentionConfig

# (preset, GQA group, kv splits, block_kv, head_dim, what the case adds)
CASES = [
    ("turboquant_k8v4", 8, 1, 16, 64),  # fp8 keys, VALUE_PAIRS values
    ("turboquant_k8v4", 1, 3, 32, 64),
    ("turboquant_k3v4_nc", 4, 3, 16, 64),  # 3-bit table keys, norm correction
    ("turboquant_k3v4_nc", 1, 1, 16, 128),
    ("turboquant_4bit_nc", 8, 3, 16, 64),  # 4-bit table keys
    ("turboquant_3bit_nc", 4, 1, 16, 64),  # uniform 3-bit values (unpack)
    ("tq_k4v3", 1, 3, 16, 64),  # calibrated: 3-bit table values, first-position bias
    ("tq_k4v3", 8, 1, 32, 64),
    ("tq_k4v4", 4, 3, 16, 64),  # INT_VALUES (symmetric values from their bits)
    ("tq_k6v5", 4, 1, 16, 64),  # 6-bit gathered keys, 5-bit gathered values
]


def kv_rows_plan(b: PagedBatch, splits: int, block_kv: int, kv_rows: bool) -> LaunchPlan:
    """The portable kernel's plan for the batch, with ``KV_ROWS`` as asked (tq_k4v4's values
    from their bits: ``int_values``)."""
    cfg = AttentionConfig(block_kv=block_kv, num_warps=1, int_values=int(b.preset.name == "tq_k4v4"))
    plan = attention_plan(
        b.query, b.kv_cache, len(b.q_len_list), b.preset, b.max_query_len, splits, config=cfg, portable=True
    )
    assert served_by(plan) == "portable"
    return dataclasses.replace(plan, constexprs={**plan.constexprs, "KV_ROWS": kv_rows})


def run(b: PagedBatch, plan: LaunchPlan) -> torch.Tensor:
    out = torch.full_like(b.query, float("nan"))
    tq_triton.attention(*b.args(), out=out, plan=plan, **b.extra())
    return out


@pytest.mark.parametrize(("preset", "group", "splits", "block_kv", "head_dim"), CASES)
def test_kv_rows_matches_reference(preset, group, splits, block_kv, head_dim, gen, device):
    # request 0 decodes (q_len 1) over a few tiles; request 1 verifies 4 tokens, its last tile
    # partial, with position 0 in its first tile (the calibrated formats' first-position terms)
    b = make_batch(gen, preset, [45, 37], [1, 4], head_dim=head_dim, num_kv_heads=2, group=group, device=device)
    plan = kv_rows_plan(b, splits, block_kv, True)
    if preset == "tq_k4v4":
        assert plan.constexprs["INT_VALUES"]
    got = run(b, plan)
    assert_close(got, reference(b))
    # the default orientation of the same plan: the same numbers up to the order of the sums
    base = run(b, dataclasses.replace(plan, constexprs={**plan.constexprs, "KV_ROWS": False}))
    torch.testing.assert_close(got.float(), base.float(), atol=2e-3, rtol=2e-3)


def test_kv_rows_is_off_by_default(gen, device):
    """The kernel and the tile step default to the usual orientation, and no plan asks for the
    experimental one."""
    for fn in (attention_kernel, attend_tile):
        assert inspect.signature(fn.fn).parameters["KV_ROWS"].default is False
    b = make_batch(gen, "turboquant_k3v4_nc", [20], [1], head_dim=64, num_kv_heads=1, group=4, device=device)
    plan = attention_plan(b.query, b.kv_cache, 1, b.preset, 1, portable=True)
    assert plan.constexprs.get("KV_ROWS", False) is False
