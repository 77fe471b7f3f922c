"""The experimental explicit-layout kernel (``attention/gluon_kernel.py``, ``TQ_GLUON=1``).

Gluon kernels do not run under Triton's interpreter. On any machine the kernel is compiled
for sm_90 (the PTX must hold the m16n8k16 matrix instruction and 16-byte shared-memory
stores for the decoded tiles); on an NVIDIA GPU it is run against tq-core, and through
test_memory_safety's metadata cases on a k8v4 batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_memory_safety as memory_safety
import torch
from tqt_helpers import ON_GPU, assert_close, make_batch, run_triton

import tq_core
from tq_triton.attention import gluon_launch, launch
from tq_triton.device_tensors import lut_table

needs_gluon = pytest.mark.skipif(not gluon_launch.gluon_available(), reason="this Triton has no Gluon")
GLUON_PRESETS = [n for n, p in tq_core.PRESETS.items() if gluon_launch.gluon_keys(p) and p.value_bits == 4]


# (preset, group, block_q, block_kv, head_dim, splits[, buffers[, balance[, wgmma[, bf16 partial
# outputs[, empty splits skipped]]]]]): 16-, 32- and 64-row tiles, each head_dim, both key kinds
COMPILED = [
    ("turboquant_k8v4", 4, 4, 32, 128, 1),
    ("turboquant_k8v4", 4, 8, 32, 128, 16),
    ("turboquant_k8v4", 8, 8, 16, 64, 16),
    ("turboquant_k8v4", 1, 16, 64, 256, 1),
    ("turboquant_k3v4_nc", 4, 4, 32, 128, 1),
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16),
    ("turboquant_k3v4_nc", 8, 8, 16, 64, 16),
    ("turboquant_k3v4_nc", 1, 16, 32, 256, 1),
    ("turboquant_k8v4", 4, 8, 32, 128, 16, 2),  # two shared buffers per tile
    ("turboquant_k3v4_nc", 8, 8, 64, 128, 16, 2),
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16, 1, 1),  # kv splits sized from the batch (split_budget)
    ("turboquant_k8v4", 8, 8, 64, 128, 16, 1, 1),
    ("turboquant_k8v4", 8, 8, 64, 128, 16, 1, 0, 1),  # Hopper's warpgroup products (gluon 3)
    ("turboquant_k3v4_nc", 8, 8, 64, 128, 16, 1, 0, 1),
    ("turboquant_k3v4_nc", 4, 16, 32, 64, 1, 1, 1, 1),
    ("turboquant_k8v4", 1, 64, 32, 256, 1, 1, 0, 1),
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16, 1, 0, 0, 1),  # bf16 partial outputs
    ("turboquant_k8v4", 8, 8, 64, 128, 16, 1, 0, 1, 1),
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16, 1, 1, 0, 0, 1),  # empty splits skipped (skip_empty)
    ("turboquant_k8v4", 8, 8, 64, 128, 16, 1, 0, 1, 0, 1),
]


@needs_gluon
def test_compiles_for_sm90():
    # in a process of its own: under TRITON_INTERPRET=1 (CI) Gluon functions cannot compile
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    helper = Path(__file__).with_name("tqt_gluon_compile.py")
    args = [",".join(map(str, c)) for c in COMPILED]
    run = subprocess.run([sys.executable, str(helper), *args], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    checks = json.loads(run.stdout.splitlines()[-1])
    assert len(checks) == len(COMPILED)
    for config, found in zip(COMPILED, checks, strict=True):
        if len(config) > 8 and config[8]:
            # the warpgroup products, and no m16n8k16 instruction left
            assert found["wgmma"] and not found["mma"], config
        else:
            assert found["mma"] and not found["wgmma"], config  # the m16n8k16 matrix instruction
        if config[0] == "turboquant_k3v4_nc":
            assert found["prmt"], config  # 3-bit keys looked up by byte permutes
        assert found["v4_shared_stores"], config  # the decoded tiles reach shared memory 16 bytes at a time
        assert found["global_loads"] and found["global_stores"], config
        if config[5] > 1:  # kv splits: the only bf16 conversion would be the partial outputs'
            assert found["bf16_pairs"] == (len(config) > 9 and bool(config[9])), config


def test_applies_only_where_it_is_written_for(monkeypatch):
    k8v4, k3v4 = tq_core.get_preset("turboquant_k8v4"), tq_core.get_preset("turboquant_k3v4_nc")
    k4v4, k3v3 = tq_core.get_preset("turboquant_4bit_nc"), tq_core.get_preset("turboquant_3bit_nc")
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(gluon_launch, "capability", lambda dev: (9, 0))

    def applies(preset=k8v4, head_dim=128, rows=32, block_kv=32, block_size=16, device=cuda, nvidia=True):
        return gluon_launch.gluon_applies(preset, head_dim, rows, block_kv, block_size, device, nvidia)

    assert applies() == gluon_launch.gluon_available()
    assert applies(preset=k3v4) == gluon_launch.gluon_available()
    assert not applies(preset=k4v4)  # 4-bit codebook keys
    assert not applies(preset=k3v3)  # 3-bit values
    assert not applies(nvidia=False)
    assert not applies(device=torch.device("cpu"))
    assert not applies(rows=128)
    assert not applies(block_kv=128)
    assert not applies(head_dim=96)
    assert not applies(block_size=24)
    monkeypatch.setattr(gluon_launch, "capability", lambda dev: (8, 6))  # no fp8 conversions
    assert not applies()


def test_warpgroup_products_only_for_64_rows_on_sm90(monkeypatch):
    cuda = torch.device("cuda", 0)
    for cap, rows, expected in [((9, 0), 64, True), ((9, 0), 32, False), ((9, 0), 16, False), ((10, 0), 64, False)]:
        monkeypatch.setattr(gluon_launch, "capability", lambda dev, cap=cap: cap)
        assert gluon_launch.wgmma_applies(rows, cuda) is expected, (cap, rows)


@pytest.mark.skipif(ON_GPU, reason="the launcher's plumbing, with the Gluon launch replaced by a recorder")
@pytest.mark.parametrize(("gluon", "group", "expected"), [(3, 8, (1, True)), (3, 4, (1, False)), (1, 8, (1, False))])
def test_launcher_passes_the_warpgroup_form(gluon, group, expected, gen, device, monkeypatch):
    """TQ_GLUON=3 asks for the warpgroup products where the tile has 64 rows (8 q heads x 8
    query tokens), one buffer otherwise; the recorder declines, so the portable kernel runs
    and its result is still checked."""
    monkeypatch.setenv("TQ_GLUON", str(gluon))
    monkeypatch.setattr(launch, "gluon_applies", lambda *args: True)
    monkeypatch.setattr(gluon_launch, "capability", lambda dev: (9, 0))
    seen = []

    def recorder(grid, args, constexprs, options=None, buffers=1, wgmma=False):
        seen.append((buffers, wgmma))
        return False

    monkeypatch.setattr(launch, "launch_gluon", recorder)
    b = make_batch(gen, "turboquant_k8v4", [40, 9], [8, 3], head_dim=64, num_kv_heads=1, group=group, device=device)
    assert_close(*run_triton(b, max_query_len=8))
    assert seen == [expected]


@pytest.fixture(params=[1, 2, 3], ids=["one_buffer", "two_buffers", "wgmma"])
def gluon_launches(request, monkeypatch):
    """TQ_GLUON=1, 2 or 3 (one or two shared buffers per tile; one, and Hopper's warpgroup
    products for the 64-row tiles) with 32-token tiles; counts the calls that ran the Gluon
    kernel."""
    monkeypatch.setenv("TQ_GLUON", str(request.param))
    monkeypatch.setenv("TQ_BLOCK_KV", "32")
    calls = []
    real = gluon_launch.launch_gluon

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(launch, "launch_gluon", counted)
    return calls


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", GLUON_PRESETS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize(
    ("group", "q_lens"), [(4, [1, 1, 8, 5]), (8, [1, 8, 3, 8]), (1, [1, 16, 3, 1]), (3, [1, 8, 2, 7])]
)
@pytest.mark.parametrize("splits", [1, 7])
def test_matches_reference(preset, head_dim, group, q_lens, splits, gen, device, gluon_launches):
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    b = make_batch(
        gen, preset, [1, 300, 2049, 77], q_lens, head_dim=head_dim, num_kv_heads=2, group=group, device=device
    )
    # the hint keeps the tiles at 32 or 64 rows (without it, 8 q heads per kv head would plan 128)
    assert_close(*run_triton(b, splits=splits, max_query_len=max(q_lens)))
    assert gluon_launches, "the Gluon kernel did not run"


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", GLUON_PRESETS)
@pytest.mark.parametrize(
    "knobs",
    [
        {"TQ_BF16_PARTIALS": "1"},  # partial outputs in bf16
        {"TQ_SKIP_EMPTY": "1"},  # short requests' surplus kv splits skipped
        {"TQ_SKIP_EMPTY": "1", "TQ_SPLIT_BUDGET": "4"},  # ... with splits sized from the batch
    ],
)
def test_split_knobs(preset, knobs, gen, device, gluon_launches, monkeypatch):
    """``bf16_partials`` and ``skip_empty`` (with and without ``split_budget``) in the Gluon
    kernel, 32- and 64-row tiles."""
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    for name, value in knobs.items():
        monkeypatch.setenv(name, value)
    for group in (4, 8):
        b = make_batch(
            gen, preset, [1, 300, 2049, 77], [1, 8, 3, 8], head_dim=128, num_kv_heads=2, group=group, device=device
        )
        assert_close(*run_triton(b, splits=7, max_query_len=8))
    assert gluon_launches, "the Gluon kernel did not run"


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", GLUON_PRESETS)
@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_long_sequences_and_block_sizes(block_size, preset, gen, device, gluon_launches):
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    b = make_batch(
        gen,
        preset,
        [32768, 9001],
        [1, 8],
        head_dim=128,
        num_kv_heads=2,
        group=4,
        block_size=block_size,
        device=device,
    )
    for splits in (1, 32):
        assert_close(*run_triton(b, splits=splits))
    assert gluon_launches


@pytest.mark.parametrize("preset", GLUON_PRESETS)
@pytest.mark.parametrize("gluon", [1, 2, 3])
def test_the_launch_passes_the_key_table_and_the_config(preset, gluon, gen, device, monkeypatch):
    """On any device, with the kernel itself replaced: what the launcher hands the Gluon
    launch. 3-bit keys get key_lut's register table as ``Centroids``, whatever
    ``key_lut`` says; the buffers and the register cap come from the launch parameters
    (``gluon`` 3 with 16-row tiles: one buffer, no warpgroup products)."""
    monkeypatch.setenv("TQ_GLUON", str(gluon))
    monkeypatch.setenv("TQ_KEY_LUT", "0")
    monkeypatch.setenv("TQ_MAX_REGISTERS", "168")
    monkeypatch.setattr(launch, "gluon_applies", lambda *a: True)
    monkeypatch.setattr(launch, "register_cap", lambda dev, n: {"maxnreg": n})
    calls = []
    monkeypatch.setattr(launch, "launch_gluon", lambda *a, **kw: calls.append((a, kw)) or True)
    b = make_batch(gen, preset, [40, 9], [1, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    run_triton(b, splits=1)
    assert len(calls) == 1
    (grid, args, constexprs, options), kw = calls[0]
    assert grid == (2, 1, 1) and options == {"maxnreg": 168}
    assert kw == {"buffers": 2 if gluon == 2 else 1, "wgmma": False}
    p = tq_core.get_preset(preset)
    if not p.key_is_fp8:
        want = lut_table(p, 64, torch.device(device))
        assert args[5].dtype == torch.int32 and torch.equal(args[5], want)
    assert constexprs["KEY_FP8"] == p.key_is_fp8 and constexprs["NUM_SPLITS"] == 1


@pytest.mark.parametrize("preset", GLUON_PRESETS)
def test_a_kernel_too_large_for_the_device_falls_back(preset, gen, device, monkeypatch):
    """Where the Gluon launch reports that its kernel does not fit the device (shared
    memory), the portable kernel runs, with its own centroid tensor (the codebook here:
    ``TQ_KEY_LUT=0``), and gives tq-core's result."""
    monkeypatch.setenv("TQ_GLUON", "1")
    monkeypatch.setenv("TQ_KEY_LUT", "0")
    monkeypatch.setattr(launch, "gluon_applies", lambda *a: True)
    calls = []
    monkeypatch.setattr(launch, "launch_gluon", lambda *a, **kw: calls.append(1) and False)
    b = make_batch(gen, preset, [40, 9], [1, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    assert_close(*run_triton(b, splits=1))
    assert calls


@needs_gluon
def test_launch_gluon_remembers_a_kernel_too_large(monkeypatch):
    from triton.runtime.errors import OutOfResources

    from tq_triton.attention import gluon_kernel

    tries = []

    class TooLarge:
        arg_names = ("BLOCK_Q", "G_PAD", "D")

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                tries.append(kwargs["BUFFERS"])
                raise OutOfResources(240_000, 101_376, "shared memory")

            return launch

    monkeypatch.setattr(gluon_kernel, "gluon_attention_kernel", TooLarge())
    monkeypatch.setattr(gluon_launch, "_TOO_LARGE", set())
    monkeypatch.setattr(gluon_launch, "_gluon_params", lambda: frozenset(TooLarge.arg_names))
    args = (torch.zeros(1),)
    cx = {"BLOCK_Q": 4, "G_PAD": 4, "D": 256}
    assert gluon_launch.launch_gluon((1, 1, 1), args, cx, None, 2) is False
    assert gluon_launch.launch_gluon((1, 1, 1), args, cx, None, 2) is False
    assert tries == [2]  # the second call did not try again
    assert gluon_launch.launch_gluon((1, 1, 1), args, cx, None, 1) is False
    assert tries == [2, 1]  # another specialisation is tried


@pytest.mark.skipif(ON_GPU, reason="the fallback is where the Gluon kernel does not apply")
def test_falls_back_to_the_triton_kernel_elsewhere(gen, device, gluon_launches):
    b = make_batch(gen, "turboquant_k8v4", [40, 9], [1, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    assert_close(*run_triton(b))
    assert not gluon_launches


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", GLUON_PRESETS)
@pytest.mark.parametrize(("splits", "budget", "skip"), memory_safety.SPLIT_MODES)
@pytest.mark.parametrize("case", list(memory_safety.CASES))
def test_out_of_range_metadata(case, splits, budget, skip, preset, gen, device, gluon_launches, monkeypatch):
    """test_memory_safety's metadata cases (bad block ids, lengths, query offsets; canaries
    around the cache and the output) on a batch of each preset the Gluon kernel takes, with
    the kv splits divided evenly and sized from the batch (``budget``: split_budget), and
    with empty splits skipped (``skip``: skip_empty)."""
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    monkeypatch.setattr(memory_safety, "PRESET", preset)
    memory_safety.test_out_of_range_metadata(case, splits, budget, skip, gen, device, monkeypatch)
    assert gluon_launches, "the Gluon kernel did not run"


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", GLUON_PRESETS)
@pytest.mark.parametrize("strided", ["block_table_rows", "block_table_cols", "seq_lens", "query_start_loc", "all"])
def test_index_tensors_read_through_their_strides(strided, preset, gen, device, gluon_launches, monkeypatch):
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    monkeypatch.setattr(memory_safety, "PRESET", preset)
    memory_safety.test_attention_reads_index_tensors_through_their_strides(strided, False, gen, device)
    assert gluon_launches, "the Gluon kernel did not run"
