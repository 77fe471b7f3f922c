"""Little-endian bit packing shared by keys and values.

Code ``i`` of a row occupies bits ``[bits*i, bits*i + bits)`` of the row's little-endian
bit stream. For 4 bits that is "two per byte, low nibble first"; for 3 bits, "8 codes per
3 bytes, code i at bit 3*(i%8) of the little-endian 24-bit group i//8" (vLLM's format).
"""

from __future__ import annotations

import torch

from .errors import DtypeError, ShapeError


def packed_bytes(n: int, bits: int) -> int:
    return (n * bits + 7) // 8


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack integer codes ``[..., n]`` (each < 2**bits) into uint8 ``[..., ceil(n*bits/8)]``."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bits={bits}: expected 1..8")
    if codes.dtype.is_floating_point or codes.dtype == torch.bool:
        raise DtypeError(f"codes: expected an integer dtype, got {codes.dtype}")
    n = codes.shape[-1]
    c = codes.to(torch.int32)
    shifts = torch.arange(bits, device=codes.device, dtype=torch.int32)
    stream = ((c[..., None] >> shifts) & 1).reshape(*codes.shape[:-1], n * bits)
    nbytes = packed_bytes(n, bits)
    pad = nbytes * 8 - n * bits
    if pad:
        stream = torch.nn.functional.pad(stream, (0, pad))
    weights = 1 << torch.arange(8, device=codes.device, dtype=torch.int32)
    packed = (stream.view(*codes.shape[:-1], nbytes, 8) * weights).sum(-1)
    return packed.to(torch.uint8)


def unpack_codes(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_codes`: uint8 ``[..., nbytes]`` -> int64 codes ``[..., n]``."""
    if packed.dtype != torch.uint8:
        raise DtypeError(f"packed: expected torch.uint8, got {packed.dtype}")
    nbytes = packed_bytes(n, bits)
    if packed.shape[-1] != nbytes:
        raise ShapeError(f"packed: last dim {packed.shape[-1]}, expected {nbytes} for {n} codes of {bits} bits")
    # code i starts at bit o = bits * i: byte o // 8, shift o % 8; shift + bits <= 15, so the
    # little-endian pair of bytes (o // 8, o // 8 + 1) holds all of it
    start = torch.arange(n, device=packed.device) * bits
    p = torch.nn.functional.pad(packed.to(torch.int32), (0, 1))
    pair = p[..., start // 8] | (p[..., start // 8 + 1] << 8)
    return ((pair >> (start % 8).to(torch.int32)) & ((1 << bits) - 1)).to(torch.int64)
