"""Independent second implementations and test doubles of the tq-core tests.

Nothing here calls tq_core's codec internals: these are the second implementations the
tests compare against. Paged batches, block tables and the dense float64 attention come
from the shared kit, :mod:`tq_core.testing`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass
class FakeEntryPoint:
    """Stands in for an installed ``importlib.metadata.EntryPoint``: ``load()`` returns ``target``."""

    name: str
    value: str
    target: Callable[..., object]

    def load(self) -> Callable[..., object]:
        return self.target


def slot_fields(slot: torch.Tensor, name: str, d: int) -> dict[str, list[int]]:
    """The bytes of each field of one encoded slot, read by the layout's offsets."""
    lay = tq_core.get_preset(name).layout(d)
    b = slot.tolist()
    out = {
        "key": b[lay.key_offset : lay.key_offset + lay.key_code_bytes],
        "value": b[lay.value_offset : lay.value_offset + lay.value_code_bytes],
        "scale": b[lay.scale_offset : lay.scale_offset + 2],
        "zero": b[lay.zero_offset : lay.zero_offset + 2],
        "pad": b[lay.slot_size :],
    }
    if lay.norm_offset is not None:
        out["norm"] = b[lay.norm_offset : lay.norm_offset + 2]
    return out
