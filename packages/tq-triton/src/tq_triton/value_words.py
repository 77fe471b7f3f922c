"""4-bit value codes to fp16, two per 32-bit operation (``value_words``, experimental, off by
default).

Nibbles ``J`` and ``J + 4`` of a little-endian 32-bit word sit 16 bits apart, so one shift,
one mask and one OR turn them into the two halves of an fp16 pair: ``0x6400 | code`` is the
fp16 number ``1024 + code`` (fp16's unit in the last place is 1 between 1024 and 2048), and
one exact fp16 subtraction centres it to ``code - 8``. The pair's halves stay side by side,
so the value tile's columns are not in head_dim order: column ``c`` of the tile holds
dimension :func:`value_columns` ``(c)``, and whatever is written from the value product's
columns goes through that map.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _pair(w, J: tl.constexpr):
    """uint32 whose halves are the fp16 bits of ``1024 + nibble J`` and ``1024 + nibble J+4``."""
    return ((w >> (4 * J)) & 0x000F000F) | 0x64006400


@triton.jit
def centred_values(w, T: tl.constexpr, D: tl.constexpr):
    """fp16 ``code - 8`` ``[T, D]`` of a 4-bit value tile, its columns in :func:`value_columns`
    order. ``w``: the tile's words, uint32 ``[T, D // 8]`` (``bitpack.load_words``)."""
    # [T, D // 8, 2, 2]: pair J = 2a + b, then the pair's halves as the last dimension
    y = tl.join(tl.join(_pair(w, 0), _pair(w, 2)), tl.join(_pair(w, 1), _pair(w, 3)))
    lo = (y & 0xFFFF).to(tl.uint16)
    hi = (y >> 16).to(tl.uint16)
    v = tl.join(lo, hi).to(tl.float16, bitcast=True)
    return v.reshape(T, D) - 1032.0


def value_columns_fn(c):
    """The head_dim index held by column ``c`` of :func:`centred_values`' tile: column
    ``8 w + 2 J + h`` holds nibble ``J + 4 h`` of word ``w``, i.e. dimension ``8 w + J + 4 h``.
    Plain integer operations, so that Triton (:data:`value_columns`) and the Gluon kernel
    compile the same function."""
    r = c % 8
    return c - r + r // 2 + (r % 2) * 4


value_columns = triton.jit(value_columns_fn)
