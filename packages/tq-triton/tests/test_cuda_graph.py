"""CUDA-graph capture: replaying store + attention equals eager execution (GPU only)."""

from __future__ import annotations

import pytest
import torch
from tqt_helpers import ON_GPU, assert_close, make_batch, reference

import tq_core
import tq_triton

pytestmark = pytest.mark.skipif(not (ON_GPU and torch.cuda.is_available()), reason="needs a CUDA device")


@pytest.mark.parametrize("preset", [*tq_core.PRESETS, *tq_core.CALIBRATED_PRESETS])
def test_graph_replay_equals_eager(preset, gen, device):
    b = make_batch(gen, preset, [3000, 517, 64], [1, 8, 3], head_dim=128, num_kv_heads=2, group=4, device=device)
    new_k = torch.randn(12, 2, 128, generator=gen).to(device, torch.bfloat16)
    new_v = torch.randn(12, 2, 128, generator=gen).to(device, torch.bfloat16)
    slots = torch.arange(b.kv_cache.shape[0] * 16 - 12, b.kv_cache.shape[0] * 16, device=device)
    out = torch.empty_like(b.query)
    # a calibrated format: its calibration, and positions for the new tokens (past position 0)
    extra = b.extra()
    positions = {"positions": torch.arange(5, 17, device=device)} if extra else {}

    def step():
        tq_triton.store(new_k, new_v, b.kv_cache, slots, preset, **extra, **positions)
        tq_triton.attention(
            b.query,
            b.kv_cache,
            b.block_table,
            b.seq_lens,
            b.query_start_loc,
            preset,
            b.scale,
            out=out,
            max_query_len=8,
            **extra,
        )

    cache0 = b.kv_cache.clone()
    step()  # warm-up, outside capture: compiles the kernels and builds the cached tables
    torch.cuda.synchronize()
    eager = out.clone()
    eager_cache = b.kv_cache.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    b.kv_cache.copy_(cache0)
    out.fill_(float("nan"))
    new_q = torch.randn(b.query.shape, generator=gen).to(device, b.query.dtype)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    assert torch.equal(b.kv_cache, eager_cache)
    # replay reads the tensors' current contents: a new query gives the new answer
    b.query.copy_(new_q)
    graph.replay()
    assert_close(out, reference(b))
