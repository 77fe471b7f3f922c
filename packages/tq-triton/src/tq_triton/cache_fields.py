"""The addressing rule of tq's cache block, for tq-triton's Triton kernels (``store`` and the
portable attention kernel's ``attention/tile``).

Entry ``t`` of a field of kv head ``h`` in block ``b`` starts at byte
``b * block_stride + h * HEAD_STRIDE + OFF + t * WIDTH`` of the cache (the rule of
``tq_core.layout.KernelFields``, whose ``constexprs()`` give every ``OFF`` and ``WIDTH``).
A kernel computes the start of its (block, head), ``Cache + b * block_stride + h *
HEAD_STRIDE``, in the order that suits its loop, and :func:`field_ptr` adds the rest.

The Gluon kernel restates the rule in ``nvidia/gluon_kernel._load_tile`` instead of
calling :func:`field_ptr`: it takes one address per group of ``TPB`` positions that share a
block and field (``OFF + first * WIDTH`` from the block's start, ``first`` the group's first
position in its block) and adds each element's offset inside the group in its explicit
layouts. :func:`field_ptr` is a ``@triton.jit`` function, not also compiled for Gluon as
``attention/bounds``' functions are; ``tests/test_gluon_kernel.py`` holds the Gluon kernel
to tq-core's results.
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
