"""Independent reference implementations and builders used by the tq-core tests.

Nothing here calls tq_core's codec internals: these are the second implementations the
tests compare against.
"""

from __future__ import annotations

import math
import struct

import torch

import tq_core

PRESET_NAMES = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")
LM_PRESETS = PRESET_NAMES[1:]
HEAD_DIMS = (64, 128, 256, 512)

# (key bits, value bits, key has an fp16 norm): vLLM's presets, spelled out again from
# docs/references.md#presets-and-bytes-per-token
PRESET_BITS = {
    "turboquant_k8v4": (8, 4, False),
    "turboquant_4bit_nc": (4, 4, True),
    "turboquant_k3v4_nc": (3, 4, True),
    "turboquant_3bit_nc": (3, 3, True),
}


def kron_hadamard(d: int) -> torch.Tensor:
    """Sylvester Hadamard by the Kronecker recursion H_2n = [[1,1],[1,-1]] (x) H_n, orthonormal, float64."""
    h = torch.ones(1, 1, dtype=torch.float64)
    base = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.kron(base, h)
    assert h.shape[0] == d, "d must be a power of two"
    return h / math.sqrt(d)


def pack_int(codes: list[int], bits: int) -> list[int]:
    """Pack codes as one little-endian integer bit stream (code i at bit bits*i)."""
    value = 0
    for i, c in enumerate(codes):
        assert 0 <= c < (1 << bits)
        value |= c << (bits * i)
    nbytes = (len(codes) * bits + 7) // 8
    return list(value.to_bytes(nbytes, "little"))


def fp16_bytes(x: float) -> list[int]:
    """IEEE half-precision bytes of x, little-endian, via struct (not torch)."""
    return list(struct.pack("<e", x))


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def paged_batch(gen: torch.Generator, seq_lens: list[int], block_size: int, spare_blocks: int = 3):
    """Random physical blocks per request.

    Returns ``(num_blocks, block_table int32 [R, max_blocks], slot_mapping int64 [sum(seq_lens)])``;
    the slot mapping lists every request's positions in order, request-major. Unused
    block_table entries hold garbage (negative or out-of-range ids) that must be ignored.
    """
    nblocks = [(s + block_size - 1) // block_size for s in seq_lens]
    num_blocks = sum(nblocks) + spare_blocks
    perm = torch.randperm(num_blocks, generator=gen)
    width = max([*nblocks, 1]) + 1
    table = torch.randint(-5, 3 * num_blocks, (len(seq_lens), width), generator=gen, dtype=torch.int32)
    used, slots = 0, []
    for r, (s, n) in enumerate(zip(seq_lens, nblocks, strict=True)):
        table[r, :n] = perm[used : used + n].to(torch.int32)
        used += n
        pos = torch.arange(s)
        slots.append(table[r, pos // block_size].long() * block_size + pos % block_size)
    slot_mapping = torch.cat(slots) if slots else torch.zeros(0, dtype=torch.int64)
    return num_blocks, table, slot_mapping


def dense_reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    seq_lens: list[int],
    q_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """Plain causal softmax attention in float64 over dense K/V ``[sum(seq_lens), Hk, d]``.

    Query rows of request r are the last q_lens[r] positions of its sequence.
    Returns float64 ``[sum(q_lens), Hq, d]``.
    """
    hq, hk = query.shape[1], key.shape[1]
    kv_of = torch.arange(hq) // (hq // hk)  # q head j reads kv head j // group
    out = torch.zeros(sum(q_lens), hq, query.shape[2], dtype=torch.float64)
    t0 = q0 = 0
    for s, ql in zip(seq_lens, q_lens, strict=True):
        for i in range(ql):
            p = s - ql + i  # position of this query token; it sees positions 0..p
            k = key[t0 : t0 + p + 1].double()[:, kv_of]  # [p + 1, Hq, d]
            v = value[t0 : t0 + p + 1].double()[:, kv_of]
            logits = torch.einsum("hd,lhd->hl", query[q0 + i].double(), k) * scale
            out[q0 + i] = torch.einsum("hl,lhd->hd", torch.softmax(logits, dim=-1), v)
        t0, q0 = t0 + s, q0 + ql
    return out


def field_mask(preset: str, head_dim: int, block_size: int, num_kv_heads: int, num_blocks: int) -> torch.Tensor:
    """uint8 mask (0xFF on field bytes, 0 on padding) of a tq paged cache, built from BlockLayout offsets."""
    p = tq_core.get_preset(preset)
    lay = p.block_layout(head_dim, block_size, num_kv_heads)
    widths = [(lay.key_offset, lay.key_code_bytes), (lay.value_offset, lay.value_code_bytes)]
    widths += [(lay.scale_offset, 2), (lay.zero_offset, 2)]
    if lay.norm_offset is not None:
        widths.append((lay.norm_offset, 2))
    block = torch.zeros(lay.block_bytes, dtype=torch.uint8)
    for h in range(num_kv_heads):
        base = h * lay.head_stride
        for off, w in widths:
            block[base + off : base + off + block_size * w] = 0xFF
    slot = p.layout(head_dim).slot_size_aligned
    return block.view(block_size, num_kv_heads, slot).expand(num_blocks, -1, -1, -1).contiguous()


def random_bytes(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, generator=gen, dtype=torch.int32).to(torch.uint8)
