"""The column order of 4-bit value codes decoded two per 32-bit operation (the Gluon kernel's
value decode, ``attention/gluon_kernel._value_words_to_fp16``).

Nibbles ``J`` and ``J + 4`` of a little-endian 32-bit word sit 16 bits apart, so one shift,
one mask and one OR turn them into the two halves of an fp16 pair: ``0x6400 | code`` is the
fp16 number ``1024 + code`` (fp16's unit in the last place is 1 between 1024 and 2048), and
one exact fp16 subtraction centres it to ``code - 8``. The pair's halves stay side by side,
so the value tile's columns are not in head_dim order: column ``c`` of the tile holds
dimension :func:`value_columns` ``(c)``, and whatever is written from the value product's
columns goes through that map (the Gluon kernel's output, and the merge kernel's, which
reads its partial outputs).

The token-rows kernel looks calibrated formats' 3-bit Lloyd-Max value codes up by nibble:
:func:`nibbles_fn` spreads 8 codes (24 stream bits) to the 8 nibbles of a word.

tq_k4v4's symmetric value codes decode in head_dim order instead (the order of the value
table's lookups, which the calibrated formats' output rotation expects):
:data:`SYMMETRIC_PAIRS_PTX`.
"""

from __future__ import annotations

import triton
import triton.language as tl  # noqa: F401  (the interpreter looks for it in a jit function's module)


def value_columns_fn(c):
    """The head_dim index held by column ``c`` of a value tile decoded two codes per 32-bit
    operation: column ``8 w + 2 J + h`` holds nibble ``J + 4 h`` of word ``w``, i.e.
    dimension ``8 w + J + 4 h``. Plain integer operations, so that Triton
    (:data:`value_columns`) and the Gluon kernel compile the same function."""
    r = c % 8
    return c - r + r // 2 + (r % 2) * 4


value_columns = triton.jit(value_columns_fn)


def nibbles_fn(x):
    """The 8 3-bit codes in bits 0-23 of ``x`` (32-bit) in the nibbles of one word, code ``i``
    in nibble ``i`` with the nibble's bit 3 clear: codes 4-7 to the high half, then codes
    2-3 of each half to its high byte, then each byte's odd code to its high nibble. Plain
    integer operations (the Gluon token-rows kernel compiles this function)."""
    t = (x & 0xFFF) | ((x << 4) & 0x0FFF0000)
    t = (t & 0x003F003F) | ((t << 2) & 0x3F003F00)
    return (t & 0x07070707) | ((t << 1) & 0x70707070)


# tq_k4v4's symmetric values from their bits (the Gluon kernel's ``int_values``), one
# elementwise step per 4 codes: ``$2``'s bits 0-15 hold codes c0..c3 (low nibble first; its
# other bits are not read), ``$0`` becomes the fp16 pair (c0 - 7.5, c1 - 7.5) (c0 in the low
# half) and ``$1`` (c2 - 7.5, c3 - 7.5). A permute puts each code in bits 4-7 of its half
# (the even codes from the word shifted left by 4), a ``lop3`` makes the fp16 ``1024 + 16
# code``, and one ``fma`` times 1/16 minus 71.5 gives ``code - 7.5``, exact (1031.5, which a
# subtraction from ``1024 + code`` would need, is no fp16 number).
SYMMETRIC_PAIRS_PTX = """{
.reg .b32 y, t, k1, k2;
shl.b32 y, $2, 4;
mov.b32 k1, 0x2c002c00;
mov.b32 k2, 0xd478d478;
prmt.b32 t, y, $2, 0x0400;
lop3.b32 t, t, 0x00F000F0, 0x64006400, 0xEA;
fma.rn.f16x2 $0, t, k1, k2;
prmt.b32 t, y, $2, 0x0501;
lop3.b32 t, t, 0x00F000F0, 0x64006400, 0xEA;
fma.rn.f16x2 $1, t, k1, k2;
}"""
