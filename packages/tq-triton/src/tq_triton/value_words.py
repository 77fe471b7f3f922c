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
