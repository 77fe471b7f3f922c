"""The column order of 4-bit value codes decoded two per 32-bit operation (the Gluon kernel's
value decode, ``nvidia/gluon_kernel._value_words_to_fp16``).

Nibbles ``J`` and ``J + 4`` of a little-endian 32-bit word sit 16 bits apart, so one shift,
one mask and one OR turn them into the two halves of an fp16 pair: ``0x6400 | code`` is the
fp16 number ``1024 + code`` (fp16's unit in the last place is 1 between 1024 and 2048), and
one exact fp16 subtraction centres it to ``code - 8``. The pair's halves stay side by side,
so the value tile's columns are not in head_dim order: column ``c`` of the tile holds
dimension :func:`value_columns` ``(c)``, and whatever is written from the value product's
columns goes through that map (the Gluon kernel's output, and the merge kernel's, which
reads its partial outputs), or is put back in head order first
(:func:`value_columns_in_head_order`: the portable kernel's accumulator of tq_k4v4's
symmetric values, before it is rotated back).

The token-rows kernel looks calibrated formats' 3-bit Lloyd-Max value codes up by nibble:
:func:`nibbles_fn` spreads 8 codes (24 stream bits) to the 8 nibbles of a word.
"""

from __future__ import annotations

import triton
import triton.language as tl


def value_columns_fn(c):
    """The head_dim index held by column ``c`` of a value tile decoded two codes per 32-bit
    operation: column ``8 w + 2 J + h`` holds nibble ``J + 4 h`` of word ``w``, i.e.
    dimension ``8 w + J + 4 h``. Plain integer operations, so that Triton
    (:data:`value_columns`) and the Gluon kernel compile the same function."""
    r = c % 8
    return c - r + r // 2 + (r % 2) * 4


value_columns = triton.jit(value_columns_fn)


@triton.jit
def value_columns_in_head_order(x, M: tl.constexpr, D: tl.constexpr):
    """``x`` ``[M, D]`` whose column ``c`` holds head_dim index :func:`value_columns` ``(c)``,
    with its columns in head_dim order (a register permutation: column ``8 w + 2 J + h`` to
    ``8 w + 4 h + J``)."""
    return tl.permute(x.reshape(M, D // 8, 4, 2), (0, 1, 3, 2)).reshape(M, D)


def nibbles_fn(x):
    """The 8 3-bit codes in bits 0-23 of ``x`` (32-bit) in the nibbles of one word, code ``i``
    in nibble ``i`` with the nibble's bit 3 clear: codes 4-7 to the high half, then codes
    2-3 of each half to its high byte, then each byte's odd code to its high nibble. Plain
    integer operations (the Gluon token-rows kernel compiles this function)."""
    t = (x & 0xFFF) | ((x << 4) & 0x0FFF0000)
    t = (t & 0x003F003F) | ((t << 2) & 0x3F003F00)
    return (t & 0x07070707) | ((t << 1) & 0x70707070)
