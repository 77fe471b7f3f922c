"""Random paged caches and metadata for the tests (built with tq_core.store)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import tq_core


@dataclass
class Case:
    preset: tq_core.Preset
    query: torch.Tensor
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    scale: float

    def args(self) -> tuple:
        return (
            self.query,
            self.kv_cache,
            self.block_table,
            self.seq_lens,
            self.query_start_loc,
            self.preset,
            self.scale,
        )

    def reference(self, out: torch.Tensor | None = None) -> torch.Tensor:
        return tq_core.attention(*self.args(), out=out)


def randint(gen: torch.Generator, lo: int, hi: int) -> int:
    """Uniform int in [lo, hi]."""
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def make_case(
    gen: torch.Generator,
    preset: str,
    *,
    head_dim: int = 128,
    block_size: int = 16,
    num_kv_heads: int = 2,
    group: int = 4,
    seq_lens: list[int],
    q_lens: list[int],
    dtype: torch.dtype = torch.float32,
    spare_blocks: int = 3,
    key_scale: float = 1.0,
) -> Case:
    """Requests with the given lengths over a shuffled block table (blocks scattered in the cache)."""
    p = tq_core.get_preset(preset)
    per_req = [(s + block_size - 1) // block_size for s in seq_lens]
    width = max([*per_req, 1])
    num_blocks = sum(per_req) + spare_blocks
    slot = p.layout(head_dim).slot_size_aligned
    # random bytes everywhere first: unused blocks and slots hold garbage, as in a real cache
    kv_cache = torch.randint(0, 256, (num_blocks, block_size, num_kv_heads, slot), generator=gen, dtype=torch.uint8)
    perm = torch.randperm(num_blocks, generator=gen)
    block_table = torch.full((len(seq_lens), width), -1, dtype=torch.int32)
    used = 0
    for r, (length, nblk) in enumerate(zip(seq_lens, per_req, strict=True)):
        block_table[r, :nblk] = perm[used : used + nblk].to(torch.int32)
        used += nblk
        if length == 0:
            continue
        # keys with a per-token spread of norms, values with offsets: exercises scale/zero
        k = torch.randn(length, num_kv_heads, head_dim, generator=gen) * key_scale
        k = k * torch.rand(length, num_kv_heads, 1, generator=gen).add(0.25)
        v = torch.randn(length, num_kv_heads, head_dim, generator=gen) + torch.randn(
            length, num_kv_heads, 1, generator=gen
        )
        pos = torch.arange(length)
        slots = block_table[r].long()[pos // block_size] * block_size + pos % block_size
        tq_core.store(k, v, kv_cache, slots, p)
    # unused table entries point at real blocks: kernels must mask by seq_len, not by -1
    block_table[block_table < 0] = int(perm[0])
    qsl = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(q_lens, dtype=torch.int32), 0)
    num_q_heads = num_kv_heads * group
    query = torch.randn(int(qsl[-1]), num_q_heads, head_dim, generator=gen).to(dtype)
    return Case(
        preset=p,
        query=query,
        kv_cache=kv_cache,
        block_table=block_table,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        query_start_loc=qsl,
        scale=head_dim**-0.5,
    )


def ragged_lengths(gen: torch.Generator, num_reqs: int, max_q: int, max_seq: int) -> tuple[list[int], list[int]]:
    """Mixed decode (q_len 1) and verify (q_len 2..max_q) requests with odd sequence lengths."""
    q_lens = [1 if randint(gen, 0, 2) == 0 else randint(gen, 1, max_q) for _ in range(num_reqs)]
    seq_lens = [randint(gen, q, max_seq) for q in q_lens]
    return seq_lens, q_lens
