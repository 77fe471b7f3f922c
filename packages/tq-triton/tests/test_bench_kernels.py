"""`tq bench --kernel`: which kernel serves each row, and the portable path's results.

The routing is judged on the H200's shipped table without a GPU (``plan_attention`` with the
H200's device facts); the portable path's outputs against tq_core on a small case (on the
device the tests run on: Triton's interpreter on CI)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tqt_helpers import assert_close, make_batch, reference

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
    return plan_attention(
        H200, p, fields, shape.q_heads, shape.kv_heads, shape.batch, longest, shape.block_size, portable=portable
    )


@pytest.mark.parametrize("preset", EVERY_PRESET)
def test_portable_rows_run_the_portable_kernel(preset):
    """--kernel portable plans the portable kernel for every named shape, with the table's
    entries for it (``portable`` over ``attention``); where the default path runs the portable
    kernel too, it plans the same launch."""
    for shape in bench.SHAPES.values():
        default = _h200_plan(shape, preset, portable=False)
        portable = _h200_plan(shape, preset, portable=True)
        assert served_by(portable) == "portable", shape.name
        assert not (portable.gluon or portable.token_rows or portable.wgmma)
        group_pad = next_pow2(shape.q_heads // shape.kv_heads)
        longest = max(shape.request_q_lens())
        p = tq_core.get_preset(preset)
        assert portable.cfg == table_config(H200, p, shape.head_dim, group_pad, longest, portable=True), shape.name
        if served_by(default) == "portable":
            assert (default.cfg, default.splits, default.block_q) == (portable.cfg, portable.splits, portable.block_q)
    # the H200 table runs k3v4_nc's decode on the token-rows kernel
    assert served_by(_h200_plan(bench.SHAPES["decode-32k"], "turboquant_k3v4_nc", False)) == "token_rows"


def test_the_portable_kernel_reads_the_portable_entries():
    """The H200 table's portable entries reach the portable kernel's plans: head_dim 256 decode
    runs 64-token tiles with 4 warps, whatever the vendor kernels' entries say."""
    for preset in ("turboquant_4bit_nc", "turboquant_k3v4_nc", "tq_k4v4"):
        plan = _h200_plan(bench.SHAPES["decode-d256"], preset, portable=True)
        assert (plan.cfg.block_kv, plan.cfg.num_warps) == (64, 4), preset
        assert portable_config(plan.cfg) == plan.cfg


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
    """A bench case run with ``case_plan(case, "portable")`` (as ``tq bench --kernel portable``
    times it) gives tq_core's attention on the same cache (the case's own store)."""
    shape = bench.Shape("tiny", batch=2, q_heads=4, kv_heads=2, head_dim=64, seq_len=40, q_len=3)
    case = bench.build_case(shape, preset, device)
    plan = bench.case_plan(case, "portable")
    assert served_by(plan) == "portable"
    got = bench.run_tq(case, plan=plan)
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


@pytest.mark.parametrize("preset", ["turboquant_k8v4", "tq_k4v3"])
def test_a_plan_made_once_serves_every_call_of_its_shapes(preset, gen, device, monkeypatch):
    """``attention_plan`` then ``attention(plan=)``: tq_core's results for two batches of the
    same shapes, with no tuning lookup or environment read in the calls; a plan for other
    heads or another preset is refused with ShapeError."""
    import tq_triton
    from tq_triton import tuning
    from tq_triton.attention import launch

    one = make_batch(gen, preset, [70, 33, 5], [1, 3, 2], head_dim=64, num_kv_heads=2, group=4, device=device)
    two = make_batch(gen, preset, [9, 120, 64], [2, 1, 3], head_dim=64, num_kv_heads=2, group=4, device=device)
    q, cache = one.args()[0], one.args()[1]
    plan = tq_triton.attention_plan(q, cache, 3, preset, max_query_len=3)
    other = tq_triton.attention_plan(q[:, :4], cache, 3, preset, max_query_len=3)
    wrong = dataclasses.replace(
        plan, constexprs=_plan_of(q, cache, "tq_k4v4" if preset == "tq_k4v3" else "turboquant_k3v4_nc")
    )

    def no_lookup(*a, **k):
        raise AssertionError("attention(plan=) looked the tuning table or the environment up")

    monkeypatch.setattr(tuning, "_env_overrides", no_lookup)
    monkeypatch.setattr(tuning, "attention_config_for", no_lookup)
    monkeypatch.setattr(launch, "debug_enabled", no_lookup)
    for b in (one, two):
        out = tq_triton.attention(*b.args(), plan=plan, **b.extra())
        assert_close(out.float(), reference(b))
    with pytest.raises(tq_core.ShapeError, match="NUM_Q_HEADS"):
        tq_triton.attention(*one.args(), plan=other, **one.extra())
    with pytest.raises(tq_core.ShapeError, match="other shapes or another preset"):
        tq_triton.attention(*one.args(), plan=wrong, **one.extra())
    with pytest.raises(tq_core.ShapeError, match="device"):
        tq_triton.attention(*one.args(), plan=dataclasses.replace(plan, device="NVIDIA H200"), **one.extra())


def _plan_of(q, cache, preset):
    """The constexprs of a plan for ``preset`` on a cache of the same bytes per slot where the
    layout allows (else another layout: the check must refuse either way)."""
    import tq_triton

    p = tq_core.get_preset(preset)
    slot = p.layout(q.shape[2]).slot_size_aligned
    fake = cache.new_zeros(cache.shape[0], cache.shape[1], cache.shape[2], slot)
    return tq_triton.attention_plan(q, fake, 3, preset, max_query_len=3).constexprs
