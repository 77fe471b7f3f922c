"""Errors, tuning overrides, torch operator registration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields, replace
from importlib import resources

import pytest
import torch
from tqt_helpers import ON_GPU, make_batch

import tq_core
import tq_triton
from tq_core.contract import load_backend, select_backend
from tq_triton import tuning
from tq_triton.attention import launch, plan
from tq_triton.device import DeviceFacts


def test_cpu_tensors_without_interpreter_point_to_tq_core():
    code = (
        "import torch, tq_triton\n"
        "k = torch.randn(2, 1, 128)\n"
        "c = torch.zeros(1, 16, 1, 196, dtype=torch.uint8)\n"
        "try:\n"
        "    tq_triton.store(k, k, c, torch.tensor([0, 1]), 'turboquant_k8v4')\n"
        "except tq_core.BackendUnavailableError as e:\n"
        "    print('RAISED', e)\n"
    ).replace("import torch, tq_triton", "import torch, tq_triton, tq_core")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "RAISED" in r.stdout, r.stdout + r.stderr
    assert "tq_core" in r.stdout and "TRITON_INTERPRET" in r.stdout


def test_shape_errors_are_tq_errors(device):
    k = torch.randn(3, 2, 128, device=device)
    cache = torch.zeros(2, 16, 2, 196, dtype=torch.uint8, device=device)
    with pytest.raises(tq_core.ShapeError, match="slot_mapping"):
        tq_triton.store(k, k, cache, torch.zeros(2, dtype=torch.int64, device=device), "turboquant_k8v4")
    with pytest.raises(tq_core.PresetError, match="preset"):
        tq_triton.store(k, k, cache, torch.zeros(3, dtype=torch.int64, device=device), "turboquant_nope")
    q = torch.randn(1, 3, 128, device=device)
    with pytest.raises(tq_core.ShapeError, match="multiple"):
        tq_triton.attention(
            q,
            cache,
            torch.zeros(1, 1, dtype=torch.int32, device=device),
            torch.ones(1, dtype=torch.int32, device=device),
            torch.tensor([0, 1], dtype=torch.int32, device=device),
            "turboquant_k8v4",
            0.1,
        )


def test_debug_mode_checks_metadata_values(monkeypatch, device):
    monkeypatch.setenv("TQ_DEBUG", "1")
    k = torch.randn(2, 1, 128, device=device)
    cache = torch.zeros(1, 16, 1, 196, dtype=torch.uint8, device=device)
    with pytest.raises(tq_core.RangeError, match="slot_mapping"):
        tq_triton.store(k, k, cache, torch.tensor([0, 99], device=device), "turboquant_k8v4")


@pytest.mark.parametrize(
    ("var", "value", "match"),
    [
        ("TQ_BLOCK_KV", "33", "power of two"),
        ("TQ_NUM_WARPS", "x", "integer"),
        ("TQ_NUM_KV_SPLITS", "-1", "in \\["),
        ("TQ_MAX_REGISTERS", "256", "in \\["),
        ("TQ_VALUE_ACC", "1", "was removed"),
        ("TQ_KEY_LUT", "2", "TQ_KEY_LUT was removed .*register table"),
        ("TQ_TOKEN_ROWS", "1", "TQ_TOKEN_ROWS was removed .*TQ_GLUON=2"),
        ("TQ_SELECTOR_PAIRS", "1", "TQ_SELECTOR_PAIRS was removed .*one 4-code group"),
        ("TQ_INT_VALUES", "1", "TQ_INT_VALUES was removed .*codes' bits"),
        ("TQ_GLUON", "3", "in \\["),
        ("TQ_WGMMA", "2", "in \\["),
        ("TQ_MIN_ROWS", "48", "power of two"),
        ("TQ_MIN_ROWS", "8", "in \\["),
    ],
)
def test_env_overrides_are_validated(monkeypatch, var, value, match):
    monkeypatch.setenv(var, value)
    with pytest.raises(tuning.TuningError, match=match):
        tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 1)


@pytest.fixture
def user_tables(monkeypatch, tmp_path):
    """An empty user tuning directory, with the table caches forgotten before and after."""
    monkeypatch.setenv("TQ_TUNING_DIR", str(tmp_path))
    tuning.clear_cache()
    yield tmp_path
    tuning.clear_cache()


def test_env_override_and_table_lookup(monkeypatch, user_tables):
    table = user_tables / "mine.json"
    table.write_text(
        '{"match": ["interpreter"], "attention": {"default": {"*": {"block_kv": 32}},'
        ' "turboquant_k8v4": {"q1": {"num_warps": 2}}}}'
    )
    cfg = tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 1)
    assert (cfg.block_kv, cfg.num_warps) == (32, 2)
    assert tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 8).num_warps == 4
    monkeypatch.setenv("TQ_BLOCK_KV", "16")
    assert tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 1).block_kv == 16
    assert tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 1).max_registers == 0
    monkeypatch.setenv("TQ_MAX_REGISTERS", "128")
    assert tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 1).max_registers == 128


def test_entries_keyed_by_tile_rows_come_after_the_bucket(user_tables):
    (user_tables / "mine.json").write_text(
        '{"match": ["interpreter"], "attention": {"turboquant_k8v4": {"q8": {"num_warps": 2, "block_kv": 32},'
        ' "q8:m64": {"num_warps": 4}, "q1:m64": {"num_warps": 8}}}}'
    )
    cpu = torch.device("cpu")

    def got(q_len, rows):
        cfg = tuning.attention_config(cpu, "turboquant_k8v4", q_len, rows)
        return cfg.num_warps, cfg.block_kv

    assert got(8, None) == got(8, 32) == (2, 32)
    assert got(8, 64) == (4, 32)  # the rows entry overrides only what it names
    assert got(1, 16) == (4, 64)  # another bucket's rows entry does not apply


def test_entries_keyed_by_head_dim_come_after_the_rows(user_tables):
    (user_tables / "mine.json").write_text(
        '{"match": ["interpreter"], "attention": {"turboquant_k8v4": {"q1": {"num_warps": 2, "block_kv": 32},'
        ' "q1:m16": {"block_kv": 16}, "q1:d64": {"num_warps": 1, "max_registers": 168}, "q8:d64": {"num_warps": 8}}}}'
    )
    cpu = torch.device("cpu")

    def got(q_len, head_dim, rows=16):
        cfg = tuning.attention_config(cpu, "turboquant_k8v4", q_len, rows, head_dim)
        return cfg.num_warps, cfg.block_kv, cfg.max_registers

    assert got(1, 128) == got(1, None) == (2, 16, 0)
    assert got(1, 64) == (1, 16, 168)  # over the bucket, next to the rows entry
    assert got(8, 128) == (4, 64, 0)  # another bucket's head_dim entry does not apply
    assert got(8, 64) == (8, 64, 0)


def test_portable_entries_follow_each_attention_entry_of_their_key(user_tables, monkeypatch):
    """A launch of the portable kernel reads the ``portable`` entry of each key after the
    ``attention`` entry of the same key; other launches never read them."""
    (user_tables / "mine.json").write_text(
        '{"match": ["interpreter"],'
        ' "attention": {"default": {"*": {"block_kv": 32}}, "turboquant_k8v4": {"q1": {"num_warps": 2, "gluon": 2},'
        ' "q1:d256": {"num_warps": 8}}},'
        ' "portable": {"default": {"*": {"waves": 8}}, "turboquant_k8v4": {"q1": {"num_warps": 4, "block_kv": 128},'
        ' "q1:d64": {"kv_splits": 8}}}}'
    )
    cpu = torch.device("cpu")

    def got(head_dim, portable):
        cfg = tuning.attention_config(cpu, "turboquant_k8v4", 1, 16, head_dim, portable=portable)
        return cfg.block_kv, cfg.num_warps, cfg.waves, cfg.kv_splits, cfg.gluon

    assert got(128, False) == (32, 2, 4, 0, 2)
    assert got(128, True) == (128, 4, 8, 0, 2)  # the plan switches the vendor kernels off
    assert got(64, True) == (128, 4, 8, 8, 2)
    assert got(256, True) == (128, 8, 8, 0, 2)  # the more specific attention entry wins
    monkeypatch.setenv("TQ_NUM_WARPS", "1")  # the environment still comes last
    assert got(128, True)[1] == 1


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("attention", "token_rows"),
        ("attention", "key_lut"),
        ("attention", "selector_pairs"),
        ("attention", "int_values"),
        ("store", "lean"),
    ],
)
def test_a_table_entry_with_a_removed_field_is_an_error_naming_the_table(user_tables, section, field):
    entry = f'{{"*": {{"{field}": 1}}}}' if section == "store" else f'{{"default": {{"*": {{"{field}": 1}}}}}}'
    table = user_tables / "old.json"
    table.write_text(f'{{"match": ["interpreter"], "{section}": {entry}}}')
    with pytest.raises(tuning.TuningError, match=f"{table}: field '{field}' was removed"):
        if section == "store":
            tuning.store_config(torch.device("cpu"), "turboquant_k8v4")
        else:
            tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 1)


def test_user_dir_skips_files_that_are_not_tables(user_tables):
    tmp_path = user_tables
    (tmp_path / "bench.json").write_text('[{"shape": "poc"}]')
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "mine.json").write_text('{"match": ["interpreter"], "attention": {"default": {"*": {"block_kv": 16}}}}')
    with pytest.warns(UserWarning, match="ignoring") as rec:
        cfg = tuning.attention_config(torch.device("cpu"), "turboquant_k8v4", 1)
    assert cfg.block_kv == 16
    assert {w.message.args[0].split(":")[0] for w in rec} == {
        f"tuning table {tmp_path / 'bench.json'}",
        f"tuning table {tmp_path / 'broken.json'}",
    }


def test_xpu_launch_options_come_from_the_table_on_xpu_only(monkeypatch, user_tables):
    monkeypatch.setattr(tuning, "device_key", lambda dev: "Intel(R) Arc(TM) B580 Graphics")
    assert tuning.launch_options(torch.device("xpu", 0)) == {"grf_mode": "large"}
    assert tuning.launch_options(torch.device("cuda", 0)) == {}


class _GrabLaunch:
    """Stands in for a jitted kernel: records the keywords of its launch instead of running."""

    def __init__(self) -> None:
        self.kwargs: dict | None = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kwargs = kwargs

        return launch


def test_both_launchers_pass_the_tables_launch_options(monkeypatch, gen, device):
    """Intel's grf_mode (the Xe2 table's xpu_launch_options) must reach the store and the
    attention kernel alike."""
    st = sys.modules["tq_triton.store"]
    grabs = {"store": _GrabLaunch(), "attention": _GrabLaunch()}
    monkeypatch.setattr(st, "_store_kernel", grabs["store"])
    monkeypatch.setattr(launch, "attention_kernel", grabs["attention"])
    options = {"grf_mode": "large"}
    monkeypatch.setattr(st, "launch_options", lambda dev: dict(options))
    monkeypatch.setattr(plan, "launch_options_for", lambda name, device_type: dict(options))
    b = make_batch(gen, "turboquant_k3v4_nc", [5, 9], [1, 2], head_dim=64, num_kv_heads=1, group=2, device=device)
    key = torch.randn(3, 1, 64, generator=gen).to(device, torch.bfloat16)
    slots = torch.tensor([0, 1, 2], device=device)
    tq_triton.store(key, key.clone(), b.kv_cache, slots, b.preset)
    tq_triton.attention(*b.args(), num_kv_splits=1)
    for name, grab in grabs.items():
        assert grab.kwargs is not None, f"{name} kernel was not launched"
        assert grab.kwargs.get("grf_mode") == "large", name


@pytest.mark.parametrize(("nvidia", "cap", "want"), [(True, 128, {"maxnreg": 128}), (True, 0, {}), (False, 128, {})])
def test_register_cap_reaches_nvidia_launches_only(nvidia, cap, want, monkeypatch):
    facts = DeviceFacts("some GPU", nvidia, (9, 0) if nvidia else (0, 0), 132)
    monkeypatch.setattr(plan, "launch_options_for", lambda name, device_type: {})
    cfg = tuning.AttentionConfig(max_registers=cap)
    p = tq_core.get_preset("turboquant_k8v4")
    fields = p.kernel_fields(p.block_layout(64, 16, 1)).constexprs()
    got = plan.plan_attention(facts, p, fields, 4, 1, 2, 1, 16, config=cfg)
    assert got.options == want


def test_sweep_grid_varies_waves_only_where_they_choose_the_splits():
    from tq_triton.cli.sweep import attention_grid

    grid = attention_grid([32, 64], [1, 4], [(1, 1), (0, 3)], [0, 32], [0], [16, 64])
    assert len(grid) == 2 * 2 * 2 * (2 + 1)
    both = attention_grid([32], [1], [(1, 1)], [0, 32], [0], [16, 64], gluon=[0, 1])
    assert len(both) == 2 * (2 + 1) and {c.gluon for c in both} == {0, 1}
    assert {c.waves for c in grid if c.kv_splits == 0} == {16, 64}
    assert {c.waves for c in grid if c.kv_splits == 32} == {tuning.AttentionConfig.waves}
    assert len(set(grid)) == len(grid)
    knobs = attention_grid([32], [1], [(1, 1)], [32], [0], [16], gluon=[0, 1, 2], wgmma=[0, 1])
    assert {(c.gluon, c.wgmma) for c in knobs} == {(k, v) for k in (0, 1, 2) for v in (0, 1)}
    assert {c.gluon for c in grid} == {tuning.AttentionConfig.gluon}
    for removed in ("value_acc", "key_lut", "token_rows", "selector_pairs", "int_values", "norm_mma"):
        with pytest.raises(TypeError, match=removed):
            attention_grid([32], [1], [(1, 1)], [32], [0], [16], **{removed: [0]})
    budgets = attention_grid([32], [1], [(1, 1)], [32], [0], [16], split_budget=[0, 4])
    assert [c.split_budget for c in budgets] == [0, 4]
    assert {c.split_budget for c in grid} == {tuning.AttentionConfig.split_budget}
    skips = attention_grid([32], [1], [(1, 1)], [32], [0], [16], split_budget=[4], skip_empty=[0, 1])
    assert [(c.split_budget, c.skip_empty) for c in skips] == [(4, 0), (4, 1)]
    assert {c.skip_empty for c in grid} == {tuning.AttentionConfig.skip_empty}


def test_sweep_compile_jobs_cover_the_timed_pass_and_report_failures(device, monkeypatch):
    """``tq sweep --compile-jobs N`` runs every (preset, bucket, configuration) of the timed
    pass once in worker processes, so that the timed pass finds its kernels compiled; a
    configuration that fails there is reported, not raised (the timed pass records it)."""
    from tq_triton import bench
    from tq_triton.cli import sweep

    grid = sweep.attention_grid([16, 32], [1], [(1, 1)], [1], [0], [4])
    jobs = sweep.compile_jobs(["turboquant_k8v4", "tq_k4v3"], ["q1", "q8"], grid, str(device), 64, None)
    assert [(j[0], j[1], j[5].block_kv) for j in jobs] == [
        (p, b, bkv) for p in ("turboquant_k8v4", "tq_k4v3") for b in ("q1", "q8") for bkv in (16, 32)
    ]
    assert {(j[2], j[3], j[4]) for j in jobs} == {(64, None, str(device))}

    # a worker's batch, small: one request of 40 positions over 3 blocks
    small = bench.Shape("small", batch=1, q_heads=4, kv_heads=1, head_dim=64, seq_len=40)
    made = []

    def small_case(preset, bucket, seq_len, head_dim, dev):
        made.append((preset, bucket))
        return bench.build_case(small, preset, torch.device(dev), seed=0)

    monkeypatch.setattr(sweep, "_worker_case", small_case)
    ran = []
    real = bench.run_tq
    monkeypatch.setattr(bench, "run_tq", lambda case, **kw: ran.append(kw["config"]) or real(case, **kw))
    assert sweep.compile_one(jobs[0]) is None
    assert made == [("turboquant_k8v4", "q1")] and ran == [jobs[0][5]]

    def refuse(case, **kw):
        raise ValueError("out of resources: shared memory")

    monkeypatch.setattr(bench, "run_tq", refuse)
    assert sweep.compile_one(jobs[1]) == "out of resources: shared memory"

    # the store grid too: every configuration the store sweep times, run once on a small
    # batch (a calibrated format's with its calibration and positions)
    store_jobs = sweep.store_compile_jobs(["turboquant_k8v4", "tq_k4v3"], str(device))
    assert [(j[0], j[2]) for j in store_jobs] == [
        (p, cfg) for p in ("turboquant_k8v4", "tq_k4v3") for cfg in sweep.store_grid(p)
    ]
    monkeypatch.setattr(sweep, "STORE_COMPILE_TOKENS", 32)
    sweep._worker_store.cache_clear()
    cal_job = next(j for j in store_jobs if j[0] == "tq_k4v3" and j[2].code_search == 2)
    assert sweep.compile_one(cal_job) is None
    sweep._worker_store.cache_clear()


def test_sweep_store_times_calibrated_formats_with_their_calibration(device, monkeypatch):
    """The store sweep passes a calibrated format's calibration and positions (its store
    refuses to run without them), and writes the fastest configuration's entry."""
    from tq_triton import bench
    from tq_triton.cli import sweep

    timed = []

    def once(fn, **kw):
        fn()  # the store runs (and raises) as it would when timed
        timed.append(1)
        return float(len(timed))

    monkeypatch.setattr(bench, "time_ms", once)
    monkeypatch.setattr(sweep, "store_grid", lambda p: [tuning.StoreConfig(block_t=16, num_warps=2, code_search=2)])
    table: dict = {"store": {}}
    sweep._sweep_store(table, ["tq_k4v3", "turboquant_k3v4_nc"], device, shape=(32, 2, 64))
    assert table["store"] == {
        "tq_k4v3": {"block_t": 16, "num_warps": 2, "code_search": 2, "ms": 1.0},
        "turboquant_k3v4_nc": {"block_t": 16, "num_warps": 2, "code_search": 2, "ms": 2.0},
    }


def test_sweep_keeps_what_it_measured_when_stopped_part_way(device, monkeypatch, tmp_path):
    """``tq sweep`` writes what it measured after every preset and bucket to ``<table>.partial``
    (``"complete": false``): a sweep killed part way (a time limit, a lost machine) keeps its
    entries there, and the table it would replace, which the launchers read, stays as it was."""
    import argparse

    from tq_triton import bench
    from tq_triton.cli import sweep

    small = bench.Shape("small", batch=1, q_heads=4, kv_heads=1, head_dim=64, seq_len=40)
    monkeypatch.setattr(sweep, "swept_case", lambda b, seq_len=None, head_dim=None: (b, small))
    monkeypatch.setattr(sweep, "gpu_device", lambda: device)
    timed = []

    def once(fn, **kw):
        if len(timed) == 2:  # the second preset's first timing: the machine goes away
            raise KeyboardInterrupt
        fn()
        timed.append(1)
        return 0.5 * len(timed)

    monkeypatch.setattr(bench, "time_ms", once)
    out = tmp_path / "table.json"
    out.write_text('{"match": ["an earlier sweep"]}')
    args = argparse.Namespace(
        presets=["turboquant_k8v4", "tq_k4v3"],
        buckets=["q1"],
        block_kv=[16, 32],
        warps=[1],
        modes=[(1, 1)],
        splits=[1],
        max_registers=[0],
        waves=[4],
        **{k: [getattr(tuning.AttentionConfig, k)] for k in sweep.KNOBS},
        seq_len=None,
        head_dim=None,
        out=out,
        no_store=True,
        compile_jobs=1,
    )
    with pytest.raises(KeyboardInterrupt):
        sweep.run(args)
    assert json.loads(out.read_text()) == {"match": ["an earlier sweep"]}
    table = json.loads((tmp_path / "table.json.partial").read_text())
    assert table["complete"] is False
    # the first preset's entry (its faster tile) is there, the second preset's is not
    assert set(table["attention"]) == {"turboquant_k8v4"}
    entry = table["attention"]["turboquant_k8v4"]["q1"]
    assert (entry["block_kv"], entry["ms"]) == (16, 0.5)
    assert [m["block_kv"] for m in table["measurements"]] == [16, 32]

    timed.clear()
    monkeypatch.setattr(bench, "time_ms", lambda fn, **kw: (fn(), 1.0)[1])
    assert sweep.run(args) == 0
    table = json.loads(out.read_text())
    assert table["complete"] is True and set(table["attention"]) == {"turboquant_k8v4", "tq_k4v3"}
    assert not (tmp_path / "table.json.partial").exists()


@pytest.mark.parametrize(
    ("bucket", "shape", "q_len"),
    [
        ("q1", "decode-32k", 1),
        ("q2", "verify-32k-q2", 2),
        ("q4", "verify-32k-q4", 4),
        ("q8", "verify-32k", 8),
        ("q16", "verify-32k-q16", 16),
        ("q8:m64", "poc", 8),
        ("q1:d64", "decode-d64", 1),
    ],
)
def test_sweep_buckets_are_swept_at_their_longest_q_len(bucket, shape, q_len):
    from tq_triton.bench import SHAPES
    from tq_triton.cli.sweep import BUCKET_SHAPES, bucket_shape

    got = bucket_shape(bucket)
    assert got.q_len == q_len and tuning.q_bucket(got.q_len) == bucket.partition(":")[0]
    assert got == SHAPES[shape] and got.name == shape
    # the verification buckets: verify-32k's batch, only the q_len differs
    if shape.startswith("verify-32k"):
        assert replace(got, q_len=8, name="verify-32k") == SHAPES["verify-32k"]
    assert set(BUCKET_SHAPES) == {"q1", "q2", "q4", "q8", "q16", "q8:m64", "q1:d64"}


def test_sweep_head_dim_keys_the_entry_by_it(user_tables):
    """--head-dim sweeps a bucket's shape at another head dim, and its entry, keyed "q1:d256",
    is what tuning reads at that head dim only."""
    from tq_triton.cli.sweep import bucket_shape, swept_case

    assert swept_case("q1", None, 256) == ("q1:d256", replace(bucket_shape("q1"), name="decode-32k-d256", head_dim=256))
    assert swept_case("q8", 4096, None) == ("q8", replace(bucket_shape("q8"), seq_len=4096, name="verify-32k@4096"))
    (user_tables / "mine.json").write_text(
        json.dumps({"match": ["interpreter"], "attention": {"turboquant_k3v4_nc": {"q1:d256": {"num_warps": 2}}}})
    )
    cpu = torch.device("cpu")
    assert tuning.attention_config(cpu, "turboquant_k3v4_nc", 1, 16, 256).num_warps == 2
    assert tuning.attention_config(cpu, "turboquant_k3v4_nc", 1, 16, 128).num_warps == 4  # the default


@pytest.mark.parametrize("kv_splits", [0, 32])
def test_sweep_entry_reads_back_as_the_measured_config(kv_splits):
    from tq_triton.cli.sweep import table_entry

    cfg = tuning.AttentionConfig(
        block_kv=32,
        num_warps=1,
        num_stages=3,
        kv_splits=kv_splits,
        waves=64,
        prefetch=0,
        max_registers=128,
        gluon=2,
        wgmma=1,
        split_budget=4,
        skip_empty=1,
    )
    entry = table_entry(cfg, 1.234567891)
    assert entry["ms"] == 1.23457
    assert ("waves" in entry) == (kv_splits == 0)
    back = tuning._apply(tuning.AttentionConfig(), entry, "sweep")
    assert back == (cfg if kv_splits == 0 else replace(cfg, waves=tuning.AttentionConfig.waves))


@pytest.mark.parametrize(
    ("reqs", "heads", "waves", "cap", "want"),
    [
        (32, 8, 64, 64, 33),
        (32, 8, 4, 64, 3),
        (1, 8, 64, 64, 64),
        (1, 8, 64, 1024, 1024),
        (1, 8, 16, 1024, 264),
        (512, 8, 4, 64, 1),
    ],
)
def test_split_count_from_waves(reqs, heads, waves, cap, want):
    cfg = tuning.AttentionConfig(waves=waves, max_kv_splits=cap)
    assert plan.plan_splits(cfg, 132, reqs, heads) == want
    assert plan.plan_splits(replace(cfg, kv_splits=7), 132, reqs, heads) == 7


@pytest.mark.parametrize(
    ("group_pad", "q_len", "min_rows", "block_q"),
    [
        (4, 8, 16, 8),
        (4, 8, 64, 16),  # a 32-row verify tile padded to 64 rows
        (8, 8, 64, 8),  # already 64 rows
        (4, 1, 16, 4),
        (4, 1, 64, 16),
        (1, 3, 32, 32),
        (32, 8, 128, 4),  # MAX_BLOCK_M caps the rows
        (128, 1, 128, 1),
    ],
)
def test_block_q_pads_the_tile_to_min_rows(group_pad, q_len, min_rows, block_q):
    assert plan.plan_block_q(group_pad, q_len, min_rows) == block_q


def test_min_rows_pads_the_launched_tile_and_keeps_the_result(monkeypatch, gen, device):
    calls = []
    real = plan.plan_block_q

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(plan, "plan_block_q", spy)
    b = make_batch(gen, "turboquant_k8v4", [40, 21], [8, 3], head_dim=64, num_kv_heads=1, group=4, device=device)
    cfg = tuning.AttentionConfig(block_kv=16, num_warps=4, num_stages=1)
    want = tq_triton.attention(*b.args(), max_query_len=8, config=cfg)
    assert calls == [(4, 8, 16)]  # an explicit config: no table lookup by the natural rows
    got = tq_triton.attention(*b.args(), max_query_len=8, config=replace(cfg, min_rows=64))
    assert calls[1:] == [(4, 8, 64)]
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)


SHIPPED_TABLES = sorted(p.name for p in resources.files("tq_triton").joinpath("tuning_tables").iterdir())
TABLE_KEYS = {"match", *tuning.ATTENTION_SECTIONS, "store", "xpu_launch_options"}
BUCKETS = {"*"} | {
    f"q{q}{key}"
    for q in (1, 2, 4, 8, 16)
    for key in ["", *(f":m{m}" for m in (16, 32, 64, 128)), *(f":d{d}" for d in tq_core.SUPPORTED_HEAD_DIMS)]
}


KNOWN_PRESETS = {**tq_core.PRESETS, **tq_core.CALIBRATED_PRESETS}


@pytest.mark.parametrize("name", SHIPPED_TABLES)
def test_shipped_tables_hold_only_what_the_loader_reads(name):
    """Every shipped table loads, and each of its entries is a valid launch parameter that the
    loader reads (nothing it would ignore, such as measured times, ships)."""
    t = tuning._load(resources.files("tq_triton").joinpath("tuning_tables", name))
    extra = set(t) - TABLE_KEYS - {"_path"}
    # the starting tables (not measured) say why they hold what they hold
    assert extra <= ({"device", "note"} if name != "nvidia_h200.json" else set()), extra
    assert t["match"] and all(isinstance(m, str) and m for m in t["match"])
    att_fields = {f.name for f in fields(tuning.AttentionConfig)}
    for top in tuning.ATTENTION_SECTIONS:
        for section, buckets in t.get(top, {}).items():
            assert section == "default" or section in KNOWN_PRESETS, section
            for bucket, entry in buckets.items():
                assert bucket in BUCKETS, (top, section, bucket)
                assert entry and set(entry) <= att_fields, (top, section, bucket, set(entry) - att_fields)
                # the portable kernel's entries do not name a vendor kernel
                assert top == "attention" or not set(entry) & {"gluon", "wgmma"}, (top, section, bucket)
                for k, v in entry.items():
                    tuning._validate(k, v, f"{name}:{top}:{section}:{bucket}")
    store_fields = {f.name for f in fields(tuning.StoreConfig)}
    for section, entry in t.get("store", {}).items():
        assert section == "*" or section in KNOWN_PRESETS, section
        assert entry and set(entry) <= store_fields, (section, set(entry) - store_fields)
        for k, v in entry.items():
            tuning._validate(k, v, f"{name}:store:{section}")
    assert isinstance(t.get("xpu_launch_options", {}), dict)


@pytest.mark.parametrize(
    ("device_name", "preset", "q_len", "rows", "want"),
    [
        (
            "NVIDIA H200",
            "turboquant_k3v4_nc",
            1,
            16,
            {"block_kv": 64, "num_warps": 1, "gluon": 2, "wgmma": 0, "split_budget": 0, "waves": 32},
        ),
        ("NVIDIA H200", "turboquant_k8v4", 1, 16, {"block_kv": 32, "max_registers": 0, "gluon": 2}),
        ("NVIDIA H200", "turboquant_k8v4", 8, 32, {"block_kv": 64, "kv_splits": 16, "gluon": 1, "split_budget": 4}),
        ("NVIDIA H200", "turboquant_k8v4", 8, 32, {"wgmma": 0, "skip_empty": 0}),
        ("NVIDIA H200", "turboquant_k8v4", 8, 64, {"block_kv": 64, "kv_splits": 16, "gluon": 1, "wgmma": 1}),
        ("NVIDIA H200", "turboquant_k8v4", 8, 64, {"split_budget": 0, "skip_empty": 0}),
        ("NVIDIA H200", "turboquant_k3v4_nc", 8, 32, {"block_kv": 64, "kv_splits": 16, "min_rows": 16, "gluon": 1}),
        ("NVIDIA H200", "turboquant_k3v4_nc", 8, 32, {"wgmma": 0, "split_budget": 4, "skip_empty": 1}),
        ("NVIDIA H200", "turboquant_k3v4_nc", 8, 64, {"block_kv": 64, "kv_splits": 16, "min_rows": 64, "gluon": 1}),
        ("NVIDIA H200", "turboquant_k3v4_nc", 8, 64, {"wgmma": 1, "split_budget": 0, "skip_empty": 0}),
        ("NVIDIA H200", "turboquant_k8v4", 8, 32, {"min_rows": 16}),
        ("NVIDIA H200", "turboquant_4bit_nc", 8, 32, {"block_kv": 64, "kv_splits": 16, "gluon": 1, "skip_empty": 1}),
        ("NVIDIA H200", "turboquant_3bit_nc", 16, 64, {"gluon": 1, "wgmma": 1, "split_budget": 0}),
        ("NVIDIA H200", "turboquant_3bit_nc", 16, 32, {"gluon": 1, "wgmma": 0, "split_budget": 4}),
        ("NVIDIA H200", "tq_k6v5", 16, 64, {"block_kv": 32, "kv_splits": 16, "gluon": 0}),
        ("Intel(R) Arc(TM) B580 Graphics", "turboquant_k8v4", 8, 32, {"block_kv": 32, "prefetch": 0, "waves": 2}),
    ],
)
def test_shipped_tables_are_found_and_read(device_name, preset, q_len, rows, want, monkeypatch, user_tables):
    monkeypatch.setattr(tuning, "device_key", lambda dev: device_name)
    cfg = tuning.attention_config(torch.device("cuda", 0), preset, q_len, rows)
    assert {k: getattr(cfg, k) for k in want} == want


@pytest.mark.parametrize(
    "preset,q_len,head_dim,want",
    [
        ("turboquant_k8v4", 1, 128, 0),
        ("turboquant_k8v4", 1, 256, 0),
        ("turboquant_k8v4", 4, 64, 168),
        ("turboquant_k8v4", 4, 128, 0),
        ("turboquant_3bit_nc", 1, 64, 0),
        ("turboquant_3bit_nc", 1, 128, 0),
        ("turboquant_3bit_nc", 2, 128, 0),
        ("turboquant_3bit_nc", 4, 64, 168),
        ("turboquant_3bit_nc", 16, 128, 0),
        ("turboquant_k3v4_nc", 1, 64, 0),
    ],
)
def test_shipped_h200_register_caps_follow_the_head_dim(preset, q_len, head_dim, want, monkeypatch, user_tables):
    # runs/2026-12-02-register-caps: a cap of 168 wins at head_dim 64, loses at 256
    monkeypatch.setattr(tuning, "device_key", lambda dev: "NVIDIA H200")
    assert tuning.attention_config(torch.device("cuda", 0), preset, q_len, 16, head_dim).max_registers == want


@pytest.mark.parametrize(
    ("preset", "block_kv", "num_warps"),
    [
        ("turboquant_k8v4", 64, 1),
        ("turboquant_k3v4_nc", 64, 2),
        ("turboquant_4bit_nc", 64, 1),
        ("turboquant_3bit_nc", 64, 1),
        ("tq_k4v3", 32, 2),
        ("tq_k4v4", 32, 1),
    ],
)
def test_shipped_h200_decode_at_head_dim_64(preset, block_kv, num_warps, monkeypatch, user_tables):
    # runs/2026-12-04-after-folding: the Gluon kernel with programs for 16 waves wins decode-d64
    # for every format (k8v4 ran the portable kernel there); head_dim 128 keeps its entries
    monkeypatch.setattr(tuning, "device_key", lambda dev: "NVIDIA H200")
    cfg = tuning.attention_config(torch.device("cuda", 0), preset, 1, 4, 64)
    want = {"block_kv": block_kv, "num_warps": num_warps, "gluon": 1, "waves": 16, "kv_splits": 0, "max_registers": 0}
    assert {k: getattr(cfg, k) for k in want} == want
    d128 = tuning.attention_config(torch.device("cuda", 0), preset, 1, 4, 128)
    assert d128.waves == (32 if preset == "turboquant_k3v4_nc" else 64)
    # runs/2026-12-04-column-tiles (calls 6-7) and -token-rows-formats (call 1): 4bit_nc's and
    # 3bit_nc's token-rows decode on 16-token tiles
    tiles = {"turboquant_4bit_nc": 16, "turboquant_3bit_nc": 16, "turboquant_k8v4": 32, "tq_k4v3": 32, "tq_k4v4": 32}
    assert d128.block_kv == tiles.get(preset, d128.block_kv)


@pytest.mark.parametrize("preset", [*tq_core.PRESETS, "tq_k4v3", "tq_k4v4"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("q_len", [1, 2, 4])
def test_shipped_h200_token_rows_kernel_at_head_dim_128(preset, head_dim, q_len, monkeypatch, user_tables):
    # runs/2026-12-04-token-rows, -column-tiles and -token-rows-formats: the vLLM formats
    # decode and verify 1-3 draft tokens at head_dim 128 on the token-rows kernel (4 q heads
    # per kv head: 4 or 8 of one column tile's 8 columns, 16 of two tiles' at q_len 4), the
    # calibrated formats decode and verify one draft token there (at q_len 4 the Gluon kernel
    # is as fast); head_dim 64 keeps its Gluon entries, 256 its kernels (k8v4: the portable one)
    from tq_triton.attention import plan
    from tq_triton.device import DeviceFacts

    monkeypatch.setattr(tuning, "device_key", lambda dev: "NVIDIA H200")
    facts = DeviceFacts(name="NVIDIA H200", nvidia=True, capability=(9, 0), multiprocessors=132)
    p = tq_core.get_preset(preset)
    fields = p.kernel_fields(p.block_layout(head_dim, 16, 8)).constexprs()
    lp = plan.plan_attention(facts, p, fields, 32, 8, 32, q_len, 16)
    vllm_formats = ("turboquant_k8v4", "turboquant_k3v4_nc", "turboquant_4bit_nc", "turboquant_3bit_nc")
    shipped = {name: (1, 2, 4) for name in vllm_formats} | {"tq_k4v3": (1, 2), "tq_k4v4": (1, 2)}
    wanted = head_dim == 128 and q_len in shipped.get(preset, ()) and plan.gluon_available()
    assert lp.token_rows == wanted
    if wanted:
        assert lp.block_q * 4 == (16 if q_len == 4 else 8) and lp.splits > 1
    if preset == "turboquant_k8v4" and head_dim == 256 and q_len == 1:
        assert not lp.gluon


VERIFY_D128 = {"kv_splits": 16, "num_warps": 2, "num_stages": 1, "prefetch": 1, "max_registers": 0, "split_budget": 0}
STAR = {"block_kv": 64, "num_warps": 4, "kv_splits": 32, "gluon": 0}


@pytest.mark.parametrize(
    ("preset", "gluon", "block_kv"),
    [
        ("turboquant_k8v4", 2, 32),
        ("turboquant_k3v4_nc", 2, 32),
        ("turboquant_4bit_nc", 2, 32),
        ("turboquant_3bit_nc", 2, 32),
    ],
)
def test_shipped_h200_verify_entries_for_q_len_2_to_4(preset, gluon, block_kv, monkeypatch, user_tables):
    # runs/2026-12-03-verify-buckets (k8v4, k3v4_nc) and runs/2026-12-03-every-shape (4bit_nc,
    # 3bit_nc): measured at head_dim 128 (verify-32k's geometry at q_len 2 and 4), on the
    # token-rows kernel since runs/2026-12-04-token-rows and -column-tiles (gluon 2); other head
    # dims keep the "*" entry and their register caps
    monkeypatch.setattr(tuning, "device_key", lambda dev: "NVIDIA H200")
    dev = torch.device("cuda", 0)
    want = {**VERIFY_D128, "gluon": gluon, "block_kv": block_kv, "min_rows": 16, "wgmma": 0, "skip_empty": 0}
    for q_len in (2, 3, 4):
        for rows in (16, 32):  # 4 and 8 q heads per kv head
            cfg = tuning.attention_config(dev, preset, q_len, rows, 128)
            assert {k: getattr(cfg, k) for k in want} == want, (q_len, rows)
        for head_dim in (64, 256):
            cfg = tuning.attention_config(dev, preset, q_len, 16, head_dim)
            assert {k: getattr(cfg, k) for k in STAR} == STAR, (q_len, head_dim)
    for q_len in (1, 8, 16):
        assert tuning.attention_config(dev, preset, q_len, 16, 128) != tuning.attention_config(dev, preset, 2, 16, 128)


@pytest.mark.parametrize(("device_name", "want"), [("NVIDIA H200", 1), ("Intel(R) Arc(TM) B580 Graphics", 2)])
def test_shipped_store_entries_choose_the_code_search(device_name, want, monkeypatch, user_tables):
    monkeypatch.setattr(tuning, "device_key", lambda dev: device_name)
    assert tuning.store_config(torch.device("cuda", 0), "turboquant_k3v4_nc").code_search == want


@pytest.mark.parametrize(
    ("preset", "want"),
    [
        ("tq_k4v3", {"block_t": 32, "num_warps": 4, "max_registers": 0, "code_search": 2}),
        ("tq_k4v4", {"block_t": 16, "num_warps": 2, "max_registers": 0, "code_search": 2}),
        ("tq_k6v5", {"block_t": 16, "num_warps": 4, "max_registers": 0, "code_search": 2}),
        ("turboquant_4bit_nc", {"block_t": 16, "num_warps": 4, "max_registers": 0, "code_search": 2}),
        ("turboquant_k3v4_nc", {"block_t": 16, "num_warps": 4, "max_registers": 0, "code_search": 1}),
    ],
)
def test_shipped_h200_store_entries_of_the_calibrated_formats(preset, want, monkeypatch, user_tables):
    # runs/2026-12-07-store-bins: codes from uniform bins where they were faster (the
    # vLLM formats' 3-bit keys stay on the binary search), without the register cap the
    # binary search wanted; tq_k4v3 on 32-token programs, tq_k4v4 on two warps
    monkeypatch.setattr(tuning, "device_key", lambda dev: "NVIDIA H200")
    cfg = tuning.store_config(torch.device("cuda", 0), preset)
    assert {k: getattr(cfg, k) for k in want} == want


def test_triton_backend_is_registered():
    b = load_backend("triton")
    assert (b.name, b.description) == ("triton", "tq_triton (Triton kernels)")
    assert b.store is tq_triton.store and b.attention is tq_triton.attention
    assert b.priority == 10 and b.max_query_len == tq_triton.MAX_QUERY_LEN == 16 and b.takes_max_query_len
    assert set(b.device_types) >= {"cuda", "xpu"} and b.auto_device_types == ("cuda", "xpu")
    # CPU tensors only under the interpreter, and never picked unasked there
    assert ("cpu" in b.device_types) == (os.environ.get("TRITON_INTERPRET") == "1")
    assert select_backend("cpu")[0].name != "triton"


def test_one_tuning_error_class():
    assert tq_triton.TuningError is tuning.TuningError is tq_core.errors.TuningError


def test_torch_ops_match_functions(gen, device):
    b = make_batch(gen, "turboquant_k3v4_nc", [30, 45], [1, 3], head_dim=64, num_kv_heads=1, group=2, device=device)
    args = (*b.args()[:5], b.preset.name, b.scale)
    ref = tq_triton.attention(*args)
    assert torch.equal(torch.ops.tq.attention(*args), ref)
    out = torch.empty_like(ref)
    torch.ops.tq.attention_out(*args, out)
    assert torch.equal(out, ref)


@pytest.mark.skipif(not ON_GPU and sys.platform != "linux", reason="opcheck runs on linux")
def test_opcheck(gen, device):
    b = make_batch(gen, "turboquant_k8v4", [20, 9], [1, 2], head_dim=64, num_kv_heads=1, group=2, device=device)
    args = (*b.args()[:5], b.preset.name, b.scale)
    torch.library.opcheck(torch.ops.tq.attention.default, args)
    out = torch.empty_like(b.query)
    torch.library.opcheck(torch.ops.tq.attention_out.default, (*args, out))
    k = torch.randn(3, 1, 64, generator=gen).to(device)
    torch.library.opcheck(
        torch.ops.tq.store.default,
        (k, k, b.kv_cache.clone(), torch.tensor([40, -1, 41], device=device), "turboquant_k8v4"),
    )


@pytest.mark.parametrize(
    ("q_len", "bucket"), [(0, "q1"), (1, "q1"), (2, "q2"), (3, "q4"), (8, "q8"), (9, "q16"), (40, "q16")]
)
def test_query_buckets(q_len, bucket):
    assert tuning.q_bucket(q_len) == bucket


@pytest.mark.parametrize(
    ("group", "q_lens", "buckets"),
    # without the max_query_len hint the launcher assumes the longest possible request;
    # the rows are those of one program's tile (q heads padded to a power of two, times tokens)
    [
        (4, [1, 1], [("q1", 16), ("q1", 16)]),
        (8, [1, 1], [("q1", 16), ("q1", 16)]),
        (4, [8, 3], [("q16", 64), ("q8", 32)]),
        (3, [8, 3], [("q16", 64), ("q8", 32)]),
    ],
)
def test_attention_looks_up_the_query_length_bucket(monkeypatch, gen, device, group, q_lens, buckets):
    # decode with 4 q heads per kv head runs 4-token tiles; its table entry is still q1
    seen = []

    def spy(device_name, preset, max_query_len, rows=None, head_dim=None, portable=False):
        assert head_dim == 64  # the cache's head dimension, for entries keyed by it
        if portable:  # the portable kernel serves: its entries are looked up by the same keys
            seen.append((tuning.q_bucket(max_query_len), rows))
        return tuning.AttentionConfig(block_kv=16, num_warps=4, num_stages=1)

    monkeypatch.setattr(plan, "attention_config_for", spy)
    b = make_batch(gen, "turboquant_k8v4", [40, 21], q_lens, head_dim=64, num_kv_heads=1, group=group, device=device)
    tq_triton.attention(*b.args())
    tq_triton.attention(*b.args(), max_query_len=b.max_query_len)
    assert seen == buckets
