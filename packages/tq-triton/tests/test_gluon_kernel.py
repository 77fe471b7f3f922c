"""The explicit-layout kernel (``nvidia/gluon_kernel.py``, ``TQ_GLUON=1``).

Gluon kernels do not run under Triton's interpreter. On any machine the kernel is compiled
for sm_90 (the PTX must hold the m16n8k16 matrix instruction, or Hopper's warpgroup
products, and 16-byte shared-memory stores for the decoded tiles); on an NVIDIA GPU it is
run against tq-core, against the portable kernel (the two compute the same arithmetic,
``attention/online_softmax.py``, so they must agree more closely than either does with
tq-core), and through test_memory_safety's metadata cases.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import test_memory_safety as memory_safety
import torch
from tqt_canary import check_calibrated_hostile_batch
from tqt_helpers import ON_GPU, assert_close, make_batch, run_triton

import tq_core
from tq_core.testing.quick import cover, quick_enabled
from tq_triton.attention import launch, plan
from tq_triton.device import DeviceFacts
from tq_triton.device_tensors import cached_value_codebook, codebook, lut_table
from tq_triton.key_lut import lut_words, selectors_fn
from tq_triton.nvidia import gluon_launch
from tq_triton.value_words import value_columns_fn

needs_gluon = pytest.mark.skipif(not plan.gluon_available(), reason="this Triton has no Gluon")
EVERY_PRESET = {**tq_core.PRESETS, **tq_core.CALIBRATED_PRESETS}
GLUON_PRESETS = [n for n, p in EVERY_PRESET.items() if plan.gluon_keys(p) and plan.gluon_values(p)]
# the presets test_memory_safety's cases run (they pass no calibration); the calibrated ones
# have their own hostile-metadata test below
VLLM_GLUON_PRESETS = [n for n in GLUON_PRESETS if n in tq_core.PRESETS]
CALIBRATED_GLUON_PRESETS = [n for n in GLUON_PRESETS if n in tq_core.CALIBRATED_PRESETS]
H100 = DeviceFacts(name="NVIDIA H100", nvidia=True, capability=(9, 0), multiprocessors=132)


# (preset, group, block_q, block_kv, head_dim, splits[, balance[, wgmma[, empty splits
# skipped]]]): 16-, 32- and 64-row tiles, each head_dim, each key kind (fp8, 3- and 4-bit
# codebook codes) and value width (4 and 3 bits)
COMPILED = [
    ("turboquant_k8v4", 4, 4, 32, 128, 1),
    ("turboquant_k8v4", 4, 8, 32, 128, 16),
    ("turboquant_k8v4", 8, 8, 16, 64, 16),
    ("turboquant_k8v4", 1, 16, 64, 256, 1),
    ("turboquant_k3v4_nc", 4, 4, 32, 128, 1),
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16),
    ("turboquant_k3v4_nc", 8, 8, 16, 64, 16),
    ("turboquant_k3v4_nc", 1, 16, 32, 256, 1),
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16, 1),  # kv splits sized from the batch (split_budget)
    ("turboquant_k8v4", 8, 8, 64, 128, 16, 1),
    ("turboquant_k8v4", 8, 8, 64, 128, 16, 0, 1),  # Hopper's warpgroup products (wgmma)
    ("turboquant_k3v4_nc", 8, 8, 64, 128, 16, 0, 1),
    ("turboquant_k3v4_nc", 4, 16, 32, 64, 1, 1, 1),
    ("turboquant_k8v4", 1, 64, 32, 256, 1, 0, 1),
    ("turboquant_k3v4_nc", 4, 8, 64, 128, 16, 1, 0, 1),  # empty splits skipped (skip_empty)
    ("turboquant_k8v4", 8, 8, 64, 128, 16, 0, 1, 1),
    ("turboquant_4bit_nc", 4, 4, 32, 128, 1),
    ("turboquant_4bit_nc", 4, 8, 64, 128, 16),
    ("turboquant_4bit_nc", 8, 8, 16, 64, 16),
    ("turboquant_4bit_nc", 1, 16, 32, 256, 1),
    ("turboquant_4bit_nc", 4, 8, 64, 128, 16, 1),
    ("turboquant_4bit_nc", 8, 8, 64, 128, 16, 0, 1),
    ("turboquant_4bit_nc", 4, 16, 32, 64, 1, 1, 1),
    ("turboquant_4bit_nc", 1, 64, 32, 256, 1, 0, 1),
    ("turboquant_4bit_nc", 4, 8, 64, 128, 16, 1, 0, 1),
    ("turboquant_3bit_nc", 4, 4, 32, 128, 1),
    ("turboquant_3bit_nc", 8, 8, 16, 64, 16),
    ("turboquant_3bit_nc", 1, 16, 32, 256, 1),
    ("turboquant_3bit_nc", 8, 8, 64, 128, 16, 0, 1),
    ("turboquant_3bit_nc", 1, 64, 32, 256, 1, 0, 1),
    ("turboquant_3bit_nc", 4, 8, 64, 128, 16, 1, 0, 1),
    # calibrated formats: 4-bit keys, 3-bit Lloyd-Max values (tq_k4v3) and tq_k4v4's 4-bit
    # symmetric ones (decoded from their codes' bits)
    ("tq_k4v3", 4, 4, 32, 128, 1),
    ("tq_k4v3", 8, 8, 16, 64, 16),
    ("tq_k4v3", 1, 16, 32, 256, 1),
    ("tq_k4v3", 8, 8, 64, 128, 16, 0, 1),
    ("tq_k4v3", 4, 8, 64, 128, 16, 1, 0, 1),
    ("tq_k4v4", 4, 8, 64, 128, 16),
    ("tq_k4v4", 1, 16, 32, 256, 1),
    ("tq_k4v4", 4, 16, 32, 64, 1, 1, 1),
    ("tq_k4v4", 1, 64, 32, 256, 1, 0, 1),
]


@needs_gluon
def _compiled_cover() -> list[tuple]:
    """:data:`COMPILED`, or under ``TQ_TEST_QUICK`` a cover of it: each preset, head_dim, tile
    rows, split kind and form (split_budget, wgmma, skip_empty) at least once."""
    if not quick_enabled():
        return COMPILED

    def values(c: tuple) -> set:
        flags = (*c[6:], 0, 0, 0)[:3]
        return {("preset", c[0]), ("d", c[4]), ("rows", c[1] * c[2]), ("splits", c[5] > 1), ("form", flags)}

    return [COMPILED[i] for i in sorted(cover([values(c) for c in COMPILED]))]


def test_compiles_for_sm90():
    # in a process of its own: under TRITON_INTERPRET=1 (CI) Gluon functions cannot compile
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    helper = Path(__file__).with_name("tqt_gluon_compile.py")
    compiled = _compiled_cover()
    args = [",".join(map(str, c)) for c in compiled]
    run = subprocess.run([sys.executable, str(helper), *args], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    checks = json.loads(run.stdout.splitlines()[-1])
    assert len(checks) == len(compiled)
    for config, found in zip(compiled, checks, strict=True):
        if len(config) > 7 and config[7]:
            # the warpgroup products, and no m16n8k16 instruction left
            assert found["wgmma"] and not found["mma"], config
        else:
            assert found["mma"] and not found["wgmma"], config  # the m16n8k16 matrix instruction
        if config[0] != "turboquant_k8v4":
            # 3- and 4-bit keys looked up by byte permutes in the register table, whose four
            # words are read once, before the loops (no centroid gathered inside them)
            assert found["prmt"], config
            assert found["loops"] and found["table_loads"] == 4 and not found["table_loads_in_loops"], config
        # a calibrated format's value table: four words, none for tq_k4v4's symmetric values
        # (decoded from their codes' bits)
        vp = tq_core.get_preset(config[0])
        assert found["value_table_loads"] == (4 if vp.calibrated and vp.value_kind != "symmetric" else 0), config
        assert found["v4_shared_stores"], config  # the decoded tiles reach shared memory 16 bytes at a time
        assert found["global_loads"] and found["global_stores"], config


def test_applies_only_where_it_is_written_for():
    k8v4, k3v4 = tq_core.get_preset("turboquant_k8v4"), tq_core.get_preset("turboquant_k3v4_nc")
    k4v4, k3v3 = tq_core.get_preset("turboquant_4bit_nc"), tq_core.get_preset("turboquant_3bit_nc")

    def refusal(preset=k8v4, head_dim=128, rows=32, block_kv=32, block_size=16, facts=H100):
        return plan.gluon_refusal(preset, head_dim, rows, block_kv, block_size, facts)

    # every vLLM preset, and the calibrated formats with 4-bit keys
    assert sorted(GLUON_PRESETS) == sorted([*tq_core.PRESETS, "tq_k4v3", "tq_k4v4"])
    # fp8, 3- and 4-bit codebook keys with 4-bit values; 3-bit keys with 3-bit values; 4-bit
    # keys with 3- and 4-bit Lloyd-Max values
    calibrated = [tq_core.get_preset(name) for name in ("tq_k4v3", "tq_k4v4")]
    for preset in (k8v4, k3v4, k4v4, k3v3, *calibrated):
        assert (refusal(preset=preset) == "") == plan.gluon_available(), preset.name
        assert plan.gluon_keys(preset) and plan.gluon_values(preset), preset.name
    # 6-bit keys and 5-bit values: no register table
    k6v5 = tq_core.get_preset("tq_k6v5")
    assert "tq_k6v5: the Gluon kernel decodes" in refusal(preset=k6v5)
    assert not plan.gluon_keys(k6v5) and not plan.gluon_values(k6v5)
    # fp8 keys with 3-bit values (no preset has them): 3-bit values take the codebook keys' threads
    k8v3 = SimpleNamespace(name="k8v3", calibrated=False, key_is_fp8=True, key_bits=8, value_bits=3)
    assert "3-bit values" in refusal(preset=k8v3)
    assert "NVIDIA" in refusal(facts=DeviceFacts("interpreter", False, (0, 0), 4))
    assert "128 query rows" in refusal(rows=128)
    assert "block_kv 128" in refusal(block_kv=128)
    assert "head_dim 96" in refusal(head_dim=96)
    assert "block_size 24" in refusal(block_size=24)
    assert "8.9" in refusal(facts=DeviceFacts("NVIDIA A100", True, (8, 6), 108))  # no fp8 conversions


def test_3_bit_value_chunks_keep_the_4_bit_values_column_order():
    # _value_chunks_to_words on the host: a chunk's 32 codes (bit stream of 3 words) as the
    # four nibble words _nibble_word makes (selector groups G and G + 1, 16 bits apart), in
    # the join tree's order (groups 0, 2, 4, 6); _value_words_to_fp16 then puts nibble
    # J + 4 h of word w at column 8 w + 2 J + h, which must hold value_columns' dimension
    rng = random.Random(3)
    for codes in [list(range(8)) * 4, [7 - c % 8 for c in range(32)], [rng.randrange(8) for _ in range(32)]]:
        stream = sum(c << (3 * j) for j, c in enumerate(codes))
        w0, w1, w2 = ((stream >> (32 * i)) & 0xFFFFFFFF for i in range(3))
        words = [selectors_fn(w0, w1, w2, g) | (selectors_fn(w0, w1, w2, g + 1) << 16) for g in (0, 2, 4, 6)]
        for col in range(32):
            w, r = divmod(col, 8)
            nibble = r // 2 + 4 * (r % 2)
            assert (words[w] >> (4 * nibble)) & 15 == codes[value_columns_fn(col)], (codes, col)


def test_warpgroup_products_only_for_64_rows_on_sm90():
    for cap, rows, expected in [((9, 0), 64, True), ((9, 0), 32, False), ((9, 0), 16, False), ((10, 0), 64, False)]:
        assert plan.wgmma_applies(rows, DeviceFacts("NVIDIA", True, cap, 132)) is expected, (cap, rows)


def test_a_request_the_gluon_kernel_cannot_serve_is_routed_and_logged_once(gen, device, monkeypatch, caplog):
    """``gluon`` 1 with 128-token tiles: the portable kernel runs (and is checked), and with
    TQ_DEBUG=1 the reason is logged once, not per call."""
    monkeypatch.setenv("TQ_GLUON", "1")
    monkeypatch.setenv("TQ_BLOCK_KV", "128")
    monkeypatch.setenv("TQ_DEBUG", "1")
    monkeypatch.setattr(launch, "device_facts", lambda dev: H100)
    plan._log_portable.cache_clear()
    calls = []
    monkeypatch.setattr(launch, "launch_gluon", lambda *a, **kw: calls.append(1) or True)
    b = make_batch(gen, "turboquant_k8v4", [40, 9], [1, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    with caplog.at_level("WARNING", logger="tq_triton"):
        for _ in range(2):
            assert_close(*run_triton(b, splits=1))
    assert not calls
    logged = [r.getMessage() for r in caplog.records if "block_kv 128" in r.getMessage()]
    assert len(logged) == 1, caplog.records


@pytest.mark.skipif(ON_GPU, reason="the launcher's plumbing, with the Gluon launch replaced by a recorder")
@pytest.mark.parametrize(("wgmma", "group", "expected"), [(1, 8, True), (1, 4, False), (0, 8, False)])
def test_launcher_passes_the_warpgroup_form(wgmma, group, expected, gen, device, monkeypatch):
    """TQ_WGMMA=1 asks for the warpgroup products where the tile has 64 rows (8 q heads x 8
    query tokens), mma.sync otherwise; the recorder declines, so the portable kernel runs
    and its result is still checked."""
    monkeypatch.setenv("TQ_GLUON", "1")
    monkeypatch.setenv("TQ_WGMMA", str(wgmma))
    monkeypatch.setattr(plan, "gluon_refusal", lambda *args: "")
    monkeypatch.setattr(launch, "device_facts", lambda dev: H100)
    seen = []

    def recorder(grid, args, constexprs, options=None, wgmma=False):
        seen.append(wgmma)
        return False

    monkeypatch.setattr(launch, "launch_gluon", recorder)
    b = make_batch(gen, "turboquant_k8v4", [40, 9], [8, 3], head_dim=64, num_kv_heads=1, group=group, device=device)
    assert_close(*run_triton(b, max_query_len=8))
    assert seen == [expected]


@pytest.fixture(params=[0, 1], ids=["mma", "wgmma"])
def gluon_launches(request, monkeypatch):
    """TQ_GLUON=1, with Hopper's warpgroup products for the 64-row tiles (TQ_WGMMA=1) or
    without, with 32-token tiles; counts the calls that ran the Gluon kernel."""
    monkeypatch.setenv("TQ_GLUON", "1")
    monkeypatch.setenv("TQ_WGMMA", str(request.param))
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
        {"TQ_SPLIT_BUDGET": "4"},  # splits sized from the batch
        {"TQ_SKIP_EMPTY": "1"},  # short requests' surplus kv splits skipped
        {"TQ_SKIP_EMPTY": "1", "TQ_SPLIT_BUDGET": "4"},  # ... with splits sized from the batch
    ],
)
def test_split_knobs(preset, knobs, gen, device, gluon_launches, monkeypatch):
    """``split_budget`` and ``skip_empty`` (alone and together) in the Gluon kernel, 32- and
    64-row tiles."""
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
@pytest.mark.parametrize("wgmma", [0, 1])
def test_the_launch_passes_the_key_table_and_the_config(preset, wgmma, gen, device, monkeypatch):
    """On any device, with the kernel itself replaced: what the launcher hands the Gluon
    launch. 3- and 4-bit keys get key_lut's register table as ``Centroids`` (for 4-bit keys
    the table of the codebook's magnitudes, centroids 8-15); the register cap comes from
    the launch parameters (``wgmma`` with 16-row tiles: no warpgroup products)."""
    monkeypatch.setenv("TQ_GLUON", "1")
    monkeypatch.setenv("TQ_WGMMA", str(wgmma))
    monkeypatch.setenv("TQ_MAX_REGISTERS", "168")
    monkeypatch.setattr(plan, "gluon_refusal", lambda *a: "")
    monkeypatch.setattr(launch, "device_facts", lambda dev: H100)
    calls = []
    monkeypatch.setattr(launch, "launch_gluon", lambda *a, **kw: calls.append((a, kw)) or True)
    b = make_batch(gen, preset, [40, 9], [1, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    run_triton(b, splits=1)
    assert len(calls) == 1
    (grid, args, constexprs, options), kw = calls[0]
    assert grid == (2, 1, 1) and options == {"maxnreg": 168}
    assert kw == {"wgmma": False}
    p = tq_core.get_preset(preset)
    if not p.key_is_fp8:
        want = lut_table(p, 64, torch.device(device))
        assert args[5].dtype == torch.int32 and torch.equal(args[5], want)
        cent = codebook(p, 64, torch.device("cpu"))[2]
        table = cent if p.key_bits == 3 else cent[8:]
        assert len(table) == 8 and torch.equal(args[5].cpu(), lut_words(table)), p.name
    if p.calibrated:
        # the calibration's six vectors, then the value codebook's register table (VCentroids)
        assert len(args) == 24 + 7 and constexprs["CALIBRATED"]
        assert all(a.dtype == torch.float32 and a.shape == (1, 64) for a in args[24:30])
        values = cached_value_codebook(p, 64, torch.device("cpu"))[1]
        assert torch.equal(args[30].cpu(), lut_words(values)), p.name
    assert constexprs["KEY_FP8"] == p.key_is_fp8 and constexprs["NUM_SPLITS"] == 1


@pytest.mark.parametrize("preset", GLUON_PRESETS)
def test_a_kernel_too_large_for_the_device_falls_back(preset, gen, device, monkeypatch):
    """Where the Gluon launch reports that its kernel does not fit the device (shared
    memory), the portable kernel runs, with its own arguments, and gives tq-core's result."""
    monkeypatch.setenv("TQ_GLUON", "1")
    monkeypatch.setattr(plan, "gluon_refusal", lambda *a: "")
    calls = []
    monkeypatch.setattr(launch, "launch_gluon", lambda *a, **kw: calls.append(1) and False)
    b = make_batch(gen, preset, [40, 9], [1, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    assert_close(*run_triton(b, splits=1))
    assert calls


@needs_gluon
def test_launch_gluon_remembers_a_kernel_too_large(monkeypatch):
    from triton.runtime.errors import OutOfResources

    from tq_triton.nvidia import gluon_kernel

    tries = []

    class TooLarge:
        arg_names = ("BLOCK_Q", "G_PAD", "D")

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                tries.append(kwargs["WGMMA"])
                raise OutOfResources(240_000, 101_376, "shared memory")

            return launch

    monkeypatch.setattr(gluon_kernel, "gluon_attention_kernel", TooLarge())
    monkeypatch.setattr(gluon_launch, "_TOO_LARGE", set())
    monkeypatch.setattr(gluon_launch, "_gluon_params", lambda: frozenset(TooLarge.arg_names))
    args = (torch.zeros(1),)
    cx = {"BLOCK_Q": 4, "G_PAD": 4, "D": 256}
    assert gluon_launch.launch_gluon((1, 1, 1), args, cx, None, wgmma=True) is False
    assert gluon_launch.launch_gluon((1, 1, 1), args, cx, None, wgmma=True) is False
    assert tries == [True]  # the second call did not try again
    assert gluon_launch.launch_gluon((1, 1, 1), args, cx, None, wgmma=False) is False
    assert tries == [True, False]  # another specialisation is tried


@pytest.mark.skipif(ON_GPU, reason="the fallback is where the Gluon kernel does not apply")
def test_falls_back_to_the_triton_kernel_elsewhere(gen, device, gluon_launches):
    b = make_batch(gen, "turboquant_k8v4", [40, 9], [1, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    assert_close(*run_triton(b))
    assert not gluon_launches


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", VLLM_GLUON_PRESETS)
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
@pytest.mark.parametrize("preset", VLLM_GLUON_PRESETS)
@pytest.mark.parametrize("strided", ["block_table_rows", "block_table_cols", "seq_lens", "query_start_loc", "all"])
def test_index_tensors_read_through_their_strides(strided, preset, gen, device, gluon_launches, monkeypatch):
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    monkeypatch.setattr(memory_safety, "PRESET", preset)
    memory_safety.test_attention_reads_index_tensors_through_their_strides(strided, False, gen, device)
    assert gluon_launches, "the Gluon kernel did not run"


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", CALIBRATED_GLUON_PRESETS)
@pytest.mark.parametrize(("splits", "budget", "skip"), memory_safety.SPLIT_MODES)
@pytest.mark.parametrize("group", [2, 8])
def test_calibrated_hostile_metadata_stays_inside_the_tensors(
    preset, splits, budget, skip, group, gen, device, gluon_launches, monkeypatch
):
    """test_calibrated's hostile batch (a block id far outside the cache, a seq_len past the
    block table, a query_start_loc past the rows) through the Gluon kernel, with 16- and
    64-row tiles (warpgroup products with ``gluon_launches``' wgmma) and each kv-split mode:
    nothing outside the cache or ``out`` is read or written, and the valid request matches
    tq-core."""
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    monkeypatch.setenv("TQ_SPLIT_BUDGET", str(budget))
    monkeypatch.setenv("TQ_SKIP_EMPTY", skip)
    check_calibrated_hostile_batch(gen, preset, 64, group, splits, device, max_query_len=8)
    assert gluon_launches, "the Gluon kernel did not run"


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run only on an NVIDIA GPU")
@needs_gluon
@pytest.mark.parametrize("preset", GLUON_PRESETS)
@pytest.mark.parametrize(
    ("group", "q_lens", "wgmma"),
    [(4, [1, 1, 8, 5], 0), (8, [1, 8, 3, 8], 0), (8, [1, 8, 3, 8], 1), (1, [1, 16, 3, 1], 0)],
)
@pytest.mark.parametrize("splits", [1, 7])
def test_both_kernels_follow_the_same_numerics(preset, group, q_lens, wgmma, splits, gen, device, monkeypatch):
    """The portable and the Gluon kernel follow one tile step (``online_softmax``); what
    differs is layout and the matrix instruction's summation order. A score that rounds
    differently in its last float32 bit can move one fp16 weight by a unit in its last
    place, which moves that query row by up to ``2**-11`` of the value's size: a few rows,
    by chance. A difference of numerics (a norm summed from fp16 squares in one kernel and
    float32 squares in the other) moves every row. So the outputs (float32) must agree on
    average within :data:`CROSS_MEAN_TOL` of the output's scale, and everywhere within
    :data:`CROSS_MAX_TOL`. (Under the interpreter, 3-bit keys decoded by the register table
    against the polynomial, another summation order: mean 1.1e-7 to 2.2e-7, largest 1e-5
    to 1e-4; fp16 squares against float32 ones: mean 5.3e-6 to 6.7e-6. docs/perf/runs/
    2026-12-06-store-positions.)"""
    if torch.device(device).type != "cuda":
        pytest.skip("cuda only")
    monkeypatch.setenv("TQ_BLOCK_KV", "32")
    monkeypatch.setenv("TQ_WGMMA", str(wgmma))
    ran = []
    real = gluon_launch.launch_gluon
    monkeypatch.setattr(launch, "launch_gluon", lambda *a, **kw: ran.append(1) or real(*a, **kw))
    b = make_batch(gen, preset, [1, 300, 2049, 77], q_lens, head_dim=128, num_kv_heads=2, group=group, device=device)
    outs = {}
    for kernel in ("0", "1"):
        monkeypatch.setenv("TQ_GLUON", kernel)
        out, ref = run_triton(b, splits=splits, max_query_len=max(q_lens), out_dtype=torch.float32)
        outs[kernel] = out
    assert ran, "the Gluon kernel did not run"
    scale = ref.abs().max()
    diff = (outs["0"] - outs["1"]).abs() / scale
    cross, mean = float(diff.max()), float(diff.mean())
    to_core = min(float((o - ref).abs().max() / scale) for o in outs.values())
    print(
        f"cross-kernel {preset} group {group} wgmma {wgmma} splits {splits}: largest {cross:.2e},"
        f" mean {mean:.2e}, to tq-core {to_core:.2e}"
    )
    assert mean <= CROSS_MEAN_TOL and cross <= CROSS_MAX_TOL, (mean, cross, to_core)


# the two kernels' mean and largest difference, relative to the output's scale (tq-core's
# bound: TOL, 1e-2): the mean 5x below that of fp16 against float32 norm squares, the largest
# two fp16 units of one weight
CROSS_MEAN_TOL = 1e-6
CROSS_MAX_TOL = 2.0**-10
