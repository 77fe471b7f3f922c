"""The addressing rule of tq's cache block, written once for every Triton kernel.

Entry ``t`` of a field of kv head ``h`` in block ``b`` starts at byte
``b * block_stride + h * HEAD_STRIDE + OFF + t * WIDTH`` of the cache (the rule of
``tq_core.layout.KernelFields``, whose ``constexprs()`` give every ``OFF`` and ``WIDTH``).
A kernel computes the start of its (block, head), ``Cache + b * block_stride + h *
HEAD_STRIDE``, in the order that suits its loop, and :func:`field_ptr` adds the rest.
"""

from __future__ import annotations

import triton
import triton.language as tl

# the width of the fp16 norm, scale and zero fields (bytes per token)
FP16_BYTES = tl.constexpr(2)


@triton.jit
def field_ptr(base, t, OFF: tl.constexpr, WIDTH: tl.constexpr):
    """Byte pointers to entries ``t`` of the field at ``OFF`` (``WIDTH`` bytes per token) of the
    (block, head) that starts at ``base``."""
    return base + OFF + t * WIDTH
