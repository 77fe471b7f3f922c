"""The batch planner and the attention paths, without vLLM (also runs on cuda/xpu with tq-triton).

Every batch mixes plain decodes, speculative verification, first prompt chunks and
chunked-prefill continuations in random order, and is checked against the independent
reference in tqv_helpers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time

import pytest
import torch
from tqv_helpers import Batch, Req, assert_matches_reference, make_batch, reference, tolerance

import tq_core
from tq_core.contract import Backend, core_backend
from tq_vllm import ops
from tq_vllm.ops import LayerStep, query_len_limit, run_batch, select_kernels
from tq_vllm.plan import BatchPlan, plan_batch

PRESETS = ("turboquant_k3v4_nc", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_3bit_nc")


def random_reqs(rng: random.Random, n: int, *, max_verify: int = 6, ordered: bool = True) -> list[Req]:
    kinds = ["decode", "verify", "prefill", "continuation", "short_extend"]
    reqs = []
    for _ in range(n):
        kind = rng.choice(kinds)
        if kind == "decode":
            reqs.append(Req(rng.randint(1, 70), 1, False))
        elif kind == "verify":
            reqs.append(Req(rng.randint(1, 70), rng.randint(2, max_verify), False))
        elif kind == "prefill":
            reqs.append(Req(0, rng.randint(1, 40), True))
        elif kind == "continuation":
            reqs.append(Req(rng.randint(1, 50), rng.randint(8, 40), True))
        else:  # a prompt tail shorter than a verify step: still a prompt chunk
            reqs.append(Req(rng.randint(1, 50), rng.randint(1, 3), True))
    if ordered:  # vLLM's reordering: decode-like requests first
        reqs.sort(key=lambda r: r.prefilling)
    return reqs


def plan_for(batch: Batch, *, threshold: int, max_q_len: int | None, use_prefilling: bool = True) -> BatchPlan:
    """The plan of ``batch`` from its metadata (host copies are copies, as vLLM's are)."""
    return plan_batch(
        num_reqs=len(batch.reqs),
        query_start_loc=batch.query_start_loc,
        query_start_loc_cpu=batch.query_start_loc.cpu().clone(),
        seq_lens=batch.seq_lens,
        block_table=batch.block_table,
        decode_threshold=threshold,
        max_q_len=max_q_len,
        is_prefilling=batch.is_prefilling if use_prefilling else None,
        seq_lens_cpu=batch.seq_lens.cpu().clone() if use_prefilling else None,
    )


def step_of(batch: Batch, out: torch.Tensor) -> LayerStep:
    b = batch
    return LayerStep(b.query, b.key, b.value, b.kv_cache, b.block_table, b.preset, b.scale, out)


def run(batch: Batch, backend: Backend, *, use_prefilling: bool, threshold: int, max_q_len: int | None):
    backend.store(batch.key, batch.value, batch.kv_cache, batch.slot_mapping, batch.preset)
    plan = plan_for(batch, threshold=threshold, max_q_len=max_q_len, use_prefilling=use_prefilling)
    sentinel = 7.0
    out = torch.full_like(batch.query, sentinel)
    run_batch(backend, plan, step_of(batch, out))
    n = batch.num_tokens
    assert bool((out[n:] == sentinel).all()), "padding rows past query_start_loc[-1] were written"
    return plan, out[:n]


def decode_like(batch: Batch, use_prefilling: bool, threshold: int) -> list[bool]:
    if use_prefilling:
        return [not r.prefilling for r in batch.reqs]
    return [r.q_len <= threshold for r in batch.reqs]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("max_q_len", [None, 1, 3, 16], ids=lambda m: f"maxq{m}")
def test_mixed_batch_matches_reference(gen, seed, device, preset, ordered, max_q_len):
    rng = random.Random(seed)
    reqs = random_reqs(rng, rng.randint(3, 9), ordered=ordered)
    batch = make_batch(gen, reqs, preset=preset, device=device, block_size=rng.choice([16, 32]))
    backend = select_kernels(device)
    limit = query_len_limit(backend)
    if limit is not None and (max_q_len is None or max_q_len > limit):
        max_q_len = limit
    plan, out = run(batch, backend, use_prefilling=True, threshold=7, max_q_len=max_q_len)
    assert_matches_reference(out, batch, decode_like(batch, True, 7), backend=backend.name, device=device)
    # the plan took every request exactly once
    chunked = {c.req for c in plan.chunks}
    assert chunked == {i for i, r in enumerate(reqs) if r.prefilling}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(gen, seed, device, dtype):
    rng = random.Random(seed)
    batch = make_batch(gen, random_reqs(rng, 6), dtype=dtype, device=device)
    backend = select_kernels(device)
    _, out = run(batch, backend, use_prefilling=True, threshold=5, max_q_len=query_len_limit(backend))
    assert out.dtype == dtype
    assert_matches_reference(out, batch, decode_like(batch, True, 5), dtype=dtype, backend=backend.name)


def test_threshold_classification_without_prefilling_flags(gen, seed, device):
    """Without vLLM's is_prefilling, q_len <= threshold decides (vLLM's reorder rule)."""
    reqs = [Req(20, 1, False), Req(33, 4, False), Req(9, 4, True), Req(0, 17, True), Req(40, 9, False)]
    batch = make_batch(gen, reqs, device=device)
    backend = select_kernels(device)
    plan, out = run(batch, backend, use_prefilling=False, threshold=4, max_q_len=query_len_limit(backend))
    assert [c.req for c in plan.chunks] == [3, 4]
    assert_matches_reference(out, batch, decode_like(batch, False, 4), backend=backend.name, device=device)


def test_reference_tells_the_two_semantics_apart(gen):
    """Guard for the tests above: decode and prompt-chunk semantics differ far beyond tolerance,
    so routing a verify request down the wrong path fails them."""
    batch = make_batch(gen, [Req(30, 5, False), Req(12, 6, True)])
    a = reference(batch, [True, True])
    b = reference(batch, [False, False])
    assert (a - b).abs().max().item() > 10 * tolerance(torch.float32, "triton")


def test_ordered_decode_batch_is_views_only(gen):
    """Uniform decode/verify batches (what CUDA graphs capture) allocate nothing."""
    reqs = [Req(25, 4, False), Req(3, 4, False), Req(60, 4, False), Req(0, 0, False)]  # last: CUDA-graph padding
    batch = make_batch(gen, reqs)
    plan = plan_for(batch, threshold=4, max_q_len=16)
    d = plan.decode
    assert d is not None and not plan.chunks
    assert d.token_index is None and d.num_reqs == 4 and d.num_tokens == 12 and d.num_verify_reqs == 3
    assert d.max_q_len == d.max_request_q_len == 4 and d.num_requests == 3
    for view, base in ((d.query_start_loc, batch.query_start_loc), (d.seq_lens, batch.seq_lens)):
        assert view.data_ptr() == base.data_ptr()
    assert d.block_table.data_ptr() == batch.block_table.data_ptr()


def test_long_verify_is_cut_into_causal_pieces(gen):
    reqs = [Req(10, 7, False), Req(41, 1, False)]
    batch = make_batch(gen, reqs)
    d = plan_for(batch, threshold=8, max_q_len=3).decode
    assert d is not None and d.token_index is None  # rows stay in order
    assert d.query_start_loc.tolist() == [0, 3, 6, 7, 8]
    assert d.max_q_len == 3 and d.max_request_q_len == 7 and d.num_requests == 2
    assert d.seq_lens.tolist() == [13, 16, 17, 42]
    assert d.block_table[:3].eq(batch.block_table[0]).all() and d.block_table[3].eq(batch.block_table[1]).all()


def test_only_padding_and_prompts(gen, device):
    batch = make_batch(gen, [Req(0, 0, False), Req(0, 9, True)], device=device)
    backend = select_kernels(device)
    plan, out = run(batch, backend, use_prefilling=True, threshold=1, max_q_len=None)
    assert plan.decode is None and len(plan.chunks) == 1 and plan.chunks[0].context_len == 0
    assert_matches_reference(out, batch, [True, False], backend=backend.name, device=device)


def test_select_kernels(monkeypatch):
    monkeypatch.delenv("TQ_VLLM_IMPL", raising=False)
    core = select_kernels("cpu")
    assert core.name == "core" and core.attention is tq_core.attention and query_len_limit(core) == 1
    assert select_kernels("cpu", "core").store is tq_core.store
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(tq_core.BackendUnavailableError, match="TRITON_INTERPRET"):
        select_kernels("cpu", "triton")
    monkeypatch.setenv("TQ_VLLM_IMPL", "fast")
    with pytest.raises(ValueError, match="TQ_VLLM_IMPL"):
        select_kernels("cpu")
    with pytest.raises(ValueError, match="fast"):
        select_kernels("cpu", "fast")


def test_missing_triton_says_how_to_get_it(monkeypatch):
    """Asked for tq-triton (or on a GPU, where tq-core's reference path is never picked
    unasked) without a loadable tq-triton: the error names the install and the fallbacks."""

    def unavailable(device, name="auto", *, need_store=True):
        if name in ("auto", "core"):
            return core_backend(), ["backend 'triton' cannot load: ImportError: no triton"] if name == "auto" else []
        raise tq_core.BackendUnavailableError(f"backend {name!r} is not installed")

    monkeypatch.setattr(ops, "select_backend", unavailable)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for device, choice in (("cpu", "triton"), ("cuda", "triton"), ("cuda", "auto"), ("xpu", "auto")):
        with pytest.raises(tq_core.BackendUnavailableError, match="pip install tq-triton") as info:
            select_kernels(device, choice)
        assert "TQ_VLLM_IMPL=core" in str(info.value) and "TQ_VLLM_DISABLE=1" in str(info.value)
    assert "no triton" in str(info.value)  # auto says why the fast backend was passed over
    assert select_kernels("cuda", "core").name == "core"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs cuda")
def test_cuda_graph_replay_of_uniform_verify_batch(gen, seed):
    """Capture the decode/verify path once, then replay it with new metadata in the same buffers."""
    pytest.importorskip("tq_triton")
    backend = select_kernels("cuda")
    limit = query_len_limit(backend)
    rng = random.Random(seed)
    q_len = rng.randint(1, limit or 16)
    first = make_batch(gen, [Req(rng.randint(1, 90), q_len, False) for _ in range(4)], device="cuda", pad_tokens=0)
    second = make_batch(gen, [Req(rng.randint(1, 90), q_len, False) for _ in range(4)], device="cuda", pad_tokens=0)
    # persistent buffers, as vLLM's model runner keeps them
    qsl, sl = first.query_start_loc.clone(), first.seq_lens.clone()
    width = max(first.block_table.shape[1], second.block_table.shape[1])
    bt = torch.zeros(4, width, dtype=torch.int32, device="cuda")
    bt[:, : first.block_table.shape[1]] = first.block_table
    # one pool large enough for either batch, as vLLM's cache is allocated once
    nblocks = max(first.kv_cache.shape[0], second.kv_cache.shape[0])
    cache = torch.zeros((nblocks, *first.kv_cache.shape[1:]), dtype=torch.uint8, device="cuda")
    query = first.query.clone()
    out = torch.zeros_like(query)
    plan = plan_batch(
        num_reqs=4, query_start_loc=qsl, query_start_loc_cpu=qsl.cpu(), seq_lens=sl, block_table=bt,
        decode_threshold=q_len, max_q_len=limit, is_prefilling=first.is_prefilling,
    )  # fmt: skip
    assert plan.decode is not None and plan.decode.token_index is None
    cache[: first.kv_cache.shape[0]].copy_(first.kv_cache)
    backend.store(first.key, first.value, cache, first.slot_mapping, first.preset)
    step = LayerStep(query, None, None, cache, bt, first.preset, first.scale, out)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # warm-up outside capture
        run_batch(backend, plan, step)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_batch(backend, plan, step)
    for b in (first, second):
        cache[: b.kv_cache.shape[0]].copy_(b.kv_cache)
        backend.store(b.key, b.value, cache, b.slot_mapping, b.preset)
        query.copy_(b.query)
        sl.copy_(b.seq_lens)
        bt.zero_()
        bt[:, : b.block_table.shape[1]] = b.block_table
        graph.replay()
        torch.cuda.synchronize()
        assert_matches_reference(out, b, [True] * 4, backend=backend.name, device="cuda")


def test_stats_file(tmp_path, monkeypatch):
    from tq_vllm import _stats, reset_stats, stats

    monkeypatch.setenv("TQ_VLLM_STATS", str(tmp_path / "tq"))
    monkeypatch.setattr(_stats, "DUMP_INTERVAL_S", 0.05)
    reset_stats()
    _stats.note_layer("decode", "model.layers.7.self_attn.attn")
    _stats.bump("decode_calls", 3)
    _stats.note_max("decode_q_len", 5)
    target = tmp_path / f"tq.{os.getpid()}.json"
    for _ in range(200):  # the writer thread wakes within DUMP_INTERVAL_S
        if target.exists():
            break
        time.sleep(0.05)
    assert json.loads(target.read_text()) == stats()
    assert stats()["layers"] == {"decode": ["model.layers.7.self_attn.attn"]} and stats()["max"] == {"decode_q_len": 5}
    reset_stats()
    assert stats() == {"counts": {}, "max": {}, "layers": {}}


def test_launch_plan_is_made_once_per_step_and_geometry(gen, seed, device):
    """A backend with ``plan_attention``: the step's first layer makes the launch plan, every
    later layer of the same geometry reuses it (``plan=``), and the outputs are the
    reference's; a new step (its own ``launch_plans``) plans again."""
    rng = random.Random(seed)
    reqs = [Req(rng.randint(1, 60), q, False) for q in (1, 3, 1, 2)]
    batch = make_batch(gen, reqs, preset="turboquant_k3v4_nc", device=device, block_size=16)
    base = select_kernels(device)
    made, seen = [], []

    def plan_attention(query, kv_cache, num_reqs, preset, max_query_len):
        made.append((tuple(query.shape[1:]), num_reqs, max_query_len, preset.name))
        return object()

    def attention(*args, plan=None, **kw):
        seen.append(plan)
        return base.attention(*args, **kw)

    backend = dataclasses.replace(base, attention=attention, plan_attention=plan_attention)
    base.store(batch.key, batch.value, batch.kv_cache, batch.slot_mapping, batch.preset)
    plan = plan_for(batch, threshold=7, max_q_len=query_len_limit(base))
    for _step in range(2):
        plans: dict = {}
        for _layer in range(3):
            out = torch.zeros_like(batch.query)
            step = step_of(batch, out)
            run_batch(backend, plan, dataclasses.replace(step, launch_plans=plans))
            assert_matches_reference(
                out[: batch.num_tokens], batch, decode_like(batch, True, 7), backend=base.name, device=device
            )
    d = plan.decode
    assert made == [(tuple(batch.query.shape[1:]), d.num_reqs, d.max_q_len, "turboquant_k3v4_nc")] * 2
    assert len(seen) == 6 and seen[0] is seen[1] is seen[2] and seen[3] is seen[4] is seen[5]
    assert seen[0] is not seen[3]
    # a step that keeps no plans (launch_plans None) plans inside each call
    seen.clear()
    run_batch(backend, plan, step_of(batch, torch.zeros_like(batch.query)))
    assert seen == [None] and len(made) == 2
