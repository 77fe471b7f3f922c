"""Bit packing: hand-built byte patterns and round trips against an independent packer."""

from __future__ import annotations

import pytest
import torch
from tqc_helpers import pack_int

from tq_core.bitpack import pack_codes, packed_bytes, unpack_codes


def _pack(codes: list[int], bits: int) -> list[int]:
    return pack_codes(torch.tensor([codes]), bits)[0].tolist()


def test_4bit_low_nibble_first():
    # byte j = code[2j] | code[2j+1] << 4
    assert _pack([1, 2, 3, 4, 5, 6, 7, 0], 4) == [0x21, 0x43, 0x65, 0x07]
    assert _pack([15, 0, 0, 15, 10, 11], 4) == [0x0F, 0xF0, 0xBA]


def test_3bit_groups_of_eight_in_24_bits():
    # code i at bit 3*(i%8) of the little-endian 24-bit group i//8:
    # codes 7..0 (MSB first): 000 111 110 101 100 011 010 001 = 0x1F58D1 -> bytes D1 58 1F
    assert _pack([1, 2, 3, 4, 5, 6, 7, 0], 3) == [0xD1, 0x58, 0x1F]
    # 111 110 101 100 011 010 001 000 = 0xFAC688
    assert _pack([0, 1, 2, 3, 4, 5, 6, 7], 3) == [0x88, 0xC6, 0xFA]
    # a single 7 at i=2 spans bits 6..8: byte0 bits 6,7 and byte1 bit 0
    assert _pack([0, 0, 7, 0, 0, 0, 0, 0], 3) == [0xC0, 0x01, 0x00]
    # 5 = 0b101 at i=5 covers bits 15..17: bit 15 (byte1 0x80) and bit 17 (byte2 0x02)
    assert _pack([0, 0, 0, 0, 0, 5, 0, 0], 3) == [0x00, 0x80, 0x02]
    assert _pack([7] * 8, 3) == [0xFF] * 3
    # the second group starts at byte 3
    assert _pack([0] * 8 + [1, 2, 3, 4, 5, 6, 7, 0], 3) == [0, 0, 0, 0xD1, 0x58, 0x1F]


def test_hand_patterns_unpack():
    assert unpack_codes(torch.tensor([[0xD1, 0x58, 0x1F]], dtype=torch.uint8), 3, 8)[0].tolist() == [
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        0,
    ]
    assert unpack_codes(torch.tensor([[0x21, 0x43]], dtype=torch.uint8), 4, 4)[0].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("n", [1, 3, 8, 13, 64, 128])
def test_pack_matches_independent_packer_and_round_trips(gen, bits, n):
    codes = torch.randint(0, 1 << bits, (5, n), generator=gen)
    packed = pack_codes(codes, bits)
    assert packed.dtype == torch.uint8
    assert packed.shape == (5, packed_bytes(n, bits)) == (5, (n * bits + 7) // 8)
    for row, c in zip(packed.tolist(), codes.tolist(), strict=True):
        assert row == pack_int(c, bits)
    assert torch.equal(unpack_codes(packed, bits, n), codes)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_leading_dims_and_int_dtypes(gen, dtype):
    codes = torch.randint(0, 8, (2, 3, 4, 64), generator=gen)
    packed = pack_codes(codes.to(dtype), 3)
    assert packed.shape == (2, 3, 4, 24)
    assert torch.equal(unpack_codes(packed, 3, 64), codes)
    # leading dims are independent rows
    assert torch.equal(packed[1, 2, 3], pack_codes(codes[1, 2, 3], 3))
