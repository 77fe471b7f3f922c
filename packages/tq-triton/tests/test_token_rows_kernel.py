"""The token-rows kernel (``nvidia/token_rows_kernel.py``, ``TQ_GLUON=2``).

Gluon kernels do not run under Triton's interpreter. On any machine the kernel is compiled
for sm_90 (the PTX must hold the m16n8k16 products and the ``movmatrix`` transposes, and no
shared memory or barrier in the tile loop: keys and values are decoded straight into the
operand registers); the launch plan must pick it only where it applies. On an NVIDIA GPU it
is run against tq-core: decode and verification at every GQA group it takes, each tile
size, kv splits and their knobs, long sequences and block sizes, and test_memory_safety's
metadata cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_attention_numerics as numerics
import test_memory_safety as memory_safety
import torch
from tqt_canary import check_calibrated_hostile_batch
from tqt_helpers import ON_GPU, assert_close, make_batch, run_triton

import tq_core
from tq_triton.attention import launch, plan
from tq_triton.device import DeviceFacts
from tq_triton.nvidia import gluon_launch
from tq_triton.tuning import AttentionConfig

H100 = DeviceFacts(name="NVIDIA H100", nvidia=True, capability=(9, 0), multiprocessors=132)
PRESETS = list(plan.TOKEN_ROWS_PRESETS)
# the presets test_memory_safety's cases run (they pass no calibration); the calibrated ones
# have their own hostile-metadata test below
VLLM_PRESETS = [n for n in PRESETS if not tq_core.get_preset(n).calibrated]
CALIBRATED_PRESETS = [n for n in PRESETS if tq_core.get_preset(n).calibrated]
needs_gpu = pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
needs_gluon = pytest.mark.skipif(not plan.gluon_available(), reason="this Triton has no Gluon")

# (preset, group, block_kv, splits[, balance[, columns]]): each key kind, tile size, split
# kind and column count
COMPILED = [
    ("turboquant_k3v4_nc", 4, 32, 16),
    ("turboquant_k3v4_nc", 3, 16, 1),
    ("turboquant_k3v4_nc", 8, 64, 16, 1),
    ("turboquant_k3v4_nc", 4, 32, 16, 0, 16),
    ("turboquant_k8v4", 4, 32, 16),
    ("turboquant_k8v4", 1, 64, 1),
    ("turboquant_k8v4", 2, 16, 16, 1),
    ("turboquant_k8v4", 16, 16, 1, 1, 16),
    ("turboquant_4bit_nc", 4, 32, 16),
    ("turboquant_4bit_nc", 8, 64, 1, 1),
    ("turboquant_4bit_nc", 4, 64, 16, 0, 16),
    ("turboquant_3bit_nc", 4, 32, 16),
    ("turboquant_3bit_nc", 8, 16, 1, 1),
    ("turboquant_3bit_nc", 4, 32, 16, 0, 16),
    ("turboquant_k3v4_nc", 4, 64, 16, 0, 8),
    ("turboquant_4bit_nc", 4, 32, 1, 1, 16),
    ("turboquant_3bit_nc", 2, 16, 16, 0, 8),
    ("tq_k4v4", 4, 32, 16),
    ("tq_k4v3", 4, 16, 1, 1),
    ("tq_k4v4", 4, 32, 16, 0, 16),
    ("tq_k4v3", 8, 32, 16, 0, 16),
    ("tq_k4v4", 8, 16, 1, 1, 16),
]


@needs_gluon
def test_compiles_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    helper = Path(__file__).with_name("tqt_token_rows_compile.py")
    args = [",".join(map(str, c)) for c in COMPILED]
    run = subprocess.run([sys.executable, str(helper), *args], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    checks = json.loads(run.stdout.splitlines()[-1])
    assert len(checks) == len(COMPILED)
    for config, found in zip(COMPILED, checks, strict=True):
        tiles = config[2] // 16
        nct = (config[5] if len(config) > 5 else 8) // 8
        norms = tq_core.get_preset(config[0]).norm_correction
        # per row tile and column tile: 8 score steps and 8 value row tiles (and per row tile 8
        # norm steps for keys with norm correction); per tile and column tile two transposes,
        # and one per column tile for the query's flags
        assert found["mma"] == 16 * tiles * nct + (8 * tiles if norms else 0), config
        assert found["movmatrix"] == (2 * tiles + 1) * nct, config
        assert found["tile_loop_lines"] > 0, config
        assert found["shared_in_tile_loop"] == 0 and found["barriers_in_tile_loop"] == 0, config
        assert found["global_loads"] and found["global_stores"], config


def _plan(
    preset="turboquant_k3v4_nc",
    group=4,
    head_dim=128,
    block_kv=32,
    block_size=16,
    gluon=2,
    longest=1,
):
    p = tq_core.get_preset(preset)
    fields = p.kernel_fields(p.block_layout(head_dim, block_size, 2)).constexprs()
    cfg = AttentionConfig(
        gluon=gluon,
        block_kv=block_kv,
        kv_splits=4,
    )
    return plan.plan_attention(H100, p, fields, 2 * group, 2, 3, longest, block_size, config=cfg)


@needs_gluon
def test_the_plan_picks_it_only_where_it_applies():
    for preset in PRESETS:
        for group, longest, columns in (
            (4, 1, 8),
            (4, 2, 8),
            (3, 1, 8),
            (8, 1, 8),
            (1, 8, 8),
            (2, 4, 8),
            (4, 3, 16),
            (4, 4, 16),
            (8, 2, 16),
            (16, 1, 16),
            (1, 16, 16),
            (3, 4, 16),
        ):
            lp = _plan(preset=preset, group=group, longest=longest)
            g_pad = plan.next_pow2(group)
            assert lp.token_rows and lp.gluon and not lp.wgmma, (preset, group)
            # 8 or 16 query columns: the group's q heads, padded, times the query tokens per
            # program; 16 only where 8 do not hold the longest request
            assert lp.block_q * g_pad == columns and lp.constexprs["BLOCK_Q"] == lp.block_q, (group, longest)
            assert lp.key_table
    assert not _plan(gluon=1).token_rows and plan.served_by(_plan(gluon=1)) == "gluon"
    # symmetric values (tq_k4v4) are decoded from their codes' bits by every kernel
    assert _plan(preset="tq_k4v4").constexprs["INT_VALUES"] is True
    assert _plan(preset="tq_k4v3").constexprs["INT_VALUES"] is False
    assert _plan().constexprs["INT_VALUES"] is False
    assert _plan(preset="tq_k4v4", gluon=1).constexprs["INT_VALUES"] is True
    assert _plan(preset="tq_k4v4", gluon=0).constexprs["INT_VALUES"] is True
    # gluon 2 where the token-rows kernel refuses: the Gluon kernel where it applies, else the
    # portable one (what gluon 1 runs)
    refusals = {
        "tq_k6v5: the token-rows kernel decodes": (dict(preset="tq_k6v5"), "portable"),
        "q_len 8 times 4 q heads": (dict(longest=8), "gluon"),
        "q_len 4 times 8 q heads": (dict(group=8, longest=4), "gluon"),
        "head_dim 64": (dict(head_dim=64), "gluon"),
        "32 q heads per kv head": (dict(group=32), "gluon"),
        "block_size 8": (dict(block_size=8), "gluon"),
        "block_kv 128": (dict(block_kv=128), "portable"),
    }
    for words, (kw, served) in refusals.items():
        lp = _plan(**kw)
        assert not lp.token_rows and plan.served_by(lp) == served, kw
        assert plan.served_by(_plan(**kw, gluon=1)) == served, kw
        p = tq_core.get_preset(kw.get("preset", "turboquant_k3v4_nc"))
        why = plan.token_rows_refusal(
            p,
            kw.get("head_dim", 128),
            plan.next_pow2(kw.get("group", 4)),
            kw.get("block_kv", 32),
            kw.get("block_size", 16),
            kw.get("longest", 1),
        )
        assert words in why, (kw, why)


@pytest.fixture(params=[16, 32, 64], ids=["t16", "t32", "t64"])
def token_rows_launches(request, monkeypatch):
    """TQ_GLUON=2 with 16-, 32- or 64-token tiles; counts the token-rows launches."""
    monkeypatch.setenv("TQ_GLUON", "2")
    monkeypatch.setenv("TQ_BLOCK_KV", str(request.param))
    calls = []
    real = gluon_launch.launch_token_rows

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(launch, "launch_token_rows", counted)
    return calls


def _cuda_only(device):
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    ("group", "q_lens"),
    [
        (4, [1, 1, 1, 1]),
        (4, [1, 2, 5, 3]),
        (8, [1, 1, 3, 2]),
        (1, [1, 16, 3, 1]),
        (3, [1, 8, 2, 7]),
        (2, [1, 4, 4, 2]),
        (16, [1, 1, 2, 1]),
    ],
)
@pytest.mark.parametrize("splits", [1, 7])
@pytest.mark.parametrize("columns", [8, 16])
def test_matches_reference(preset, group, q_lens, splits, columns, gen, device, token_rows_launches):
    """Every GQA group the kernel takes, with one column tile (8 columns) and with two (16);
    the hint is the q_len one program's columns hold, so that longer requests run in several
    query chunks."""
    _cuda_only(device)
    hint = columns // plan.next_pow2(group)
    if hint == 0:
        pytest.skip(f"{group} q heads per kv head take 16 columns")
    b = make_batch(gen, preset, [1, 300, 2049, 77], q_lens, head_dim=128, num_kv_heads=2, group=group, device=device)
    assert_close(*run_triton(b, splits=splits, max_query_len=hint))
    assert token_rows_launches, "the token-rows kernel did not run"


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", [p for p in PRESETS if tq_core.get_preset(p).norm_correction])
@pytest.mark.parametrize(
    ("group", "q_lens", "columns"), [(4, [1, 1, 1, 1], 8), (4, [1, 2, 5, 3], 16), (1, [1, 16, 3, 1], 8)]
)
def test_norm_corrected_keys(preset, group, q_lens, columns, gen, device, token_rows_launches):
    """Codebook keys with norm correction: their sums of squared centroids on the matrix unit,
    at 8 and 16 query columns."""
    _cuda_only(device)
    b = make_batch(gen, preset, [1, 300, 2049, 77], q_lens, head_dim=128, num_kv_heads=2, group=group, device=device)
    assert_close(*run_triton(b, splits=7, max_query_len=columns // plan.next_pow2(group)))
    assert token_rows_launches


@needs_gpu
@needs_gluon
@pytest.mark.parametrize(
    ("group", "q_lens", "columns"), [(4, [1, 1, 1, 1], 8), (4, [1, 2, 5, 3], 16), (1, [1, 16, 3, 1], 8)]
)
@pytest.mark.parametrize("splits", [1, 7])
def test_symmetric_values(group, q_lens, columns, splits, gen, device, token_rows_launches):
    """tq_k4v4's symmetric values decoded from their codes' bits, at 8 and 16 query columns."""
    _cuda_only(device)
    b = make_batch(gen, "tq_k4v4", [1, 300, 2049, 77], q_lens, head_dim=128, num_kv_heads=2, group=group, device=device)
    assert_close(*run_triton(b, splits=splits, max_query_len=columns // plan.next_pow2(group)))
    assert token_rows_launches


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_3bit_nc", "turboquant_k8v4"])
def test_scores_carry_no_systematic_rounding_bias(preset, gen, device, token_rows_launches):
    """test_attention_numerics' check at head_dim 128 on this kernel (16 q heads per kv head:
    two column tiles)."""
    _cuda_only(device)
    numerics.assert_scores_unbiased(preset, gen, device, 128)
    assert token_rows_launches


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    "knobs", [{"TQ_SPLIT_BUDGET": "4"}, {"TQ_SKIP_EMPTY": "1"}, {"TQ_SKIP_EMPTY": "1", "TQ_SPLIT_BUDGET": "4"}]
)
def test_split_knobs(preset, knobs, gen, device, token_rows_launches, monkeypatch):
    _cuda_only(device)
    for name, value in knobs.items():
        monkeypatch.setenv(name, value)
    for group, columns in ((4, 8), (8, 8), (4, 16), (8, 16)):
        b = make_batch(
            gen, preset, [1, 300, 2049, 77], [1, 2, 3, 1], head_dim=128, num_kv_heads=2, group=group, device=device
        )
        assert_close(*run_triton(b, splits=7, max_query_len=columns // group))
    assert token_rows_launches


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("block_size", [16, 32, 128])
@pytest.mark.parametrize("q_lens", [[1, 2], [4, 3]], ids=["8_columns", "16_columns"])
def test_long_sequences_and_block_sizes(block_size, q_lens, preset, gen, device, token_rows_launches):
    _cuda_only(device)
    b = make_batch(
        gen, preset, [32768, 9001], q_lens, head_dim=128, num_kv_heads=2, group=4, block_size=block_size, device=device
    )
    for splits in (1, 32):
        assert_close(*run_triton(b, splits=splits))
    assert token_rows_launches


# every split mode at 2 q heads per kv head (8 columns), two at 4 (16: two column tiles)
METADATA_MODES = [(*mode, 2) for mode in memory_safety.SPLIT_MODES] + [(1, 0, "0", 4), (3, 8, "1", 4)]


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", VLLM_PRESETS)
@pytest.mark.parametrize(("splits", "budget", "skip", "group"), METADATA_MODES)
@pytest.mark.parametrize("case", list(memory_safety.CASES))
def test_out_of_range_metadata(
    case, splits, budget, skip, group, preset, gen, device, token_rows_launches, monkeypatch
):
    """test_memory_safety's metadata cases at head_dim 128 (canaries around the cache and the
    output); its longest request (4 tokens) takes 8 columns at 2 q heads per kv head, 16 at 4."""
    _cuda_only(device)
    monkeypatch.setattr(memory_safety, "PRESET", preset)
    monkeypatch.setattr(memory_safety, "D", 128)
    monkeypatch.setattr(memory_safety, "GROUP", group)
    memory_safety.test_out_of_range_metadata(case, splits, budget, skip, gen, device, monkeypatch)
    assert token_rows_launches, "the token-rows kernel did not run"


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", VLLM_PRESETS)
@pytest.mark.parametrize("strided", ["block_table_rows", "block_table_cols", "seq_lens", "query_start_loc", "all"])
def test_index_tensors_read_through_their_strides(strided, preset, gen, device, token_rows_launches, monkeypatch):
    _cuda_only(device)
    monkeypatch.setattr(memory_safety, "PRESET", preset)
    monkeypatch.setattr(memory_safety, "D", 128)
    memory_safety.test_attention_reads_index_tensors_through_their_strides(strided, False, gen, device)
    assert token_rows_launches


@needs_gpu
@needs_gluon
@pytest.mark.parametrize("preset", CALIBRATED_PRESETS)
@pytest.mark.parametrize(("splits", "budget", "skip"), memory_safety.SPLIT_MODES)
@pytest.mark.parametrize("group", [2, 4], ids=["8_columns", "16_columns"])
def test_calibrated_hostile_metadata_stays_inside_the_tensors(
    preset, splits, budget, skip, group, gen, device, token_rows_launches, monkeypatch
):
    """test_calibrated's hostile batch (a block id far outside the cache, a seq_len past the
    block table, a query_start_loc past the rows) at head_dim 128 through this kernel, each
    kv-split mode, one and two column tiles: nothing outside the cache or ``out`` is read or
    written, and the valid request matches tq-core."""
    _cuda_only(device)
    monkeypatch.setenv("TQ_SPLIT_BUDGET", str(budget))
    monkeypatch.setenv("TQ_SKIP_EMPTY", skip)
    check_calibrated_hostile_batch(gen, preset, 128, group, splits, device, max_query_len=4)
    assert token_rows_launches, "the token-rows kernel did not run"
