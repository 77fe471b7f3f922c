"""`tq bench --kernel`: which kernel serves each row, and the portable path's results.

The routing is judged on the H200's shipped table without a GPU (``plan_attention`` with the
H200's device facts); the portable path's outputs against tq_core on a small case (on the
device the tests run on: Triton's interpreter on CI)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tqt_helpers import assert_close

import tq_core
from tq_triton import bench
from tq_triton.attention.plan import next_pow2, plan_attention, portable_config, served_by, table_config
from tq_triton.device import DeviceFacts

H200 = DeviceFacts(name="NVIDIA H200", nvidia=True, capability=(9, 0), multiprocessors=132)
EVERY_PRESET = (*tq_core.PRESETS, *tq_core.CALIBRATED_PRESETS)


def _h200_plan(shape: bench.Shape, preset: str, portable: bool):
    p = tq_core.get_preset(preset)
    fields = p.kernel_fields(p.block_layout(shape.head_dim, shape.block_size, shape.kv_heads)).constexprs()
    longest = max(shape.request_q_lens())
    config = None
    if portable:
        group_pad = next_pow2(shape.q_heads // shape.kv_heads)
        config = portable_config(table_config(H200, p, shape.head_dim, group_pad, longest))
    return plan_attention(
        H200, p, fields, shape.q_heads, shape.kv_heads, shape.batch, longest, shape.block_size, config=config
    )


@pytest.mark.parametrize("preset", EVERY_PRESET)
def test_portable_rows_run_the_portable_kernel(preset):
    """--kernel portable plans the portable kernel for every named shape, with the table's
    tiles and splits; the default path keeps the table's vendor kernels where it names them."""
    for shape in bench.SHAPES.values():
        default = _h200_plan(shape, preset, portable=False)
        portable = _h200_plan(shape, preset, portable=True)
        assert served_by(portable) == "portable", shape.name
        assert not (portable.gluon or portable.token_rows or portable.wgmma)
        assert (portable.cfg.block_kv, portable.splits) == (default.cfg.block_kv, default.splits), shape.name
    # the H200 table runs k3v4_nc's decode on the token-rows kernel
    assert served_by(_h200_plan(bench.SHAPES["decode-32k"], "turboquant_k3v4_nc", False)) == "token_rows"


def test_served_by_names_each_kernel():
    shape = bench.SHAPES["poc"]
    plan = _h200_plan(shape, "turboquant_k3v4_nc", portable=False)
    names = {
        served_by(dataclasses.replace(plan, gluon=False, token_rows=False, wgmma=False)),
        served_by(dataclasses.replace(plan, gluon=True, token_rows=False, wgmma=False)),
        served_by(dataclasses.replace(plan, gluon=True, token_rows=False, wgmma=True)),
        served_by(dataclasses.replace(plan, gluon=True, token_rows=True, wgmma=False)),
    }
    assert names == {"portable", "gluon", "gluon-wgmma", "token_rows"}


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "tq_k4v4"])
def test_portable_case_matches_the_reference(preset, device):
    """A bench case run through ``case_plan(case, "portable")``'s config gives tq_core's
    attention on the same cache (the case's own store)."""
    shape = bench.Shape("tiny", batch=2, q_heads=4, kv_heads=2, head_dim=64, seq_len=40, q_len=3)
    case = bench.build_case(shape, preset, device)
    plan = bench.case_plan(case, "portable")
    assert served_by(plan) == "portable"
    got = bench.run_tq(case, config=plan.cfg)
    want = tq_core.attention(
        case.query.float().cpu(),
        case.kv_cache.cpu(),
        case.block_table.cpu(),
        case.seq_lens.cpu(),
        case.query_start_loc.cpu(),
        preset,
        case.scale,
        **({} if case.calibration is None else {"calibration": case.calibration.to(torch.device("cpu"))}),
    )
    assert_close(got.float().cpu(), want)
    with pytest.raises(ValueError, match="kernel 'vendor'"):
        bench.case_plan(case, "vendor")
