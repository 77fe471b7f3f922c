"""Builders for paged batches used by the tq-triton tests (named apart from tq-core's
test helpers so both suites can run in one pytest process)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

import tq_core

ON_GPU = os.environ.get("TQ_TEST_DEVICE", "cpu") != "cpu"


def gen(seed: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@dataclass
class Batch:
    query: torch.Tensor
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    preset: str
    scale: float
    max_query_len: int


def make_batch(
    preset: str,
    seq_lens: list[int],
    q_lens: list[int],
    *,
    head_dim: int,
    num_kv_heads: int,
    group: int,
    block_size: int,
    g: torch.Generator,
    device: torch.device,
    dtype: torch.dtype = torch.bfloat16,
    spare_blocks: int = 3,
) -> Batch:
    """A paged cache filled by tq_core.store over shuffled blocks (unused table entries hold
    out-of-range garbage that must never be read)."""
    nb_per = [(s + block_size - 1) // block_size for s in seq_lens]
    nblocks = sum(nb_per) + spare_blocks
    slot = tq_core.get_preset(preset).layout(head_dim).slot_size_aligned
    cache = torch.randint(
        0, 256, (nblocks, block_size, num_kv_heads, slot), generator=g, device=device, dtype=torch.int32
    ).to(torch.uint8)
    perm = torch.randperm(nblocks, generator=g, device=device)
    width = max(nb_per) + 1
    table = torch.full((len(seq_lens), width), 10**6, dtype=torch.int32, device=device)
    used = 0
    for r, s in enumerate(seq_lens):
        ids = perm[used : used + nb_per[r]]
        used += nb_per[r]
        table[r, : nb_per[r]] = ids.to(torch.int32)
        if s == 0:
            continue
        k = torch.randn(s, num_kv_heads, head_dim, generator=g, device=device) * 2
        k[..., :3] *= 6  # a few high-magnitude channels, as LLM keys have
        v = torch.randn(s, num_kv_heads, head_dim, generator=g, device=device)
        pos = torch.arange(s, device=device)
        tq_core.store(k.to(dtype), v.to(dtype), cache, ids[pos // block_size] * block_size + pos % block_size, preset)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q = torch.randn(sum(q_lens), num_kv_heads * group, head_dim, generator=g, device=device).to(dtype)
    return Batch(
        q,
        cache,
        table,
        torch.tensor(seq_lens, dtype=torch.int32, device=device),
        qsl,
        preset,
        head_dim**-0.5,
        max(q_lens) if q_lens else 0,
    )
