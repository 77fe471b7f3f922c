"""Attention over tq's paged compressed cache: decode and speculative verification.

- :mod:`.launch`: :func:`attention`, the public entry point: checks, plan, launch; and
  :func:`attention_plan`, a call's plan made once per step and passed as ``plan=``;
- :mod:`.plan`: what a call launches: the tuning lookup, tile rows, kv splits, which kernel
  (where the Gluon kernel applies) and its compile-time arguments;
- :mod:`.online_softmax`: the tile step's arithmetic, written once, compiled by both kernels;
- :mod:`.kernel`: the ``@triton.jit`` attention kernel (the portable one) and the split-merge
  kernel;
- :mod:`.tile`: jit helpers that load one K/V tile and attend to it;
- :mod:`.bounds`: one program's metadata, clamped, and its kv split, compiled by both
  attention kernels.

The NVIDIA-only kernels that the plan may choose instead of the portable one (Gluon, inline
PTX) are in :mod:`tq_triton.nvidia`.
"""

from .launch import attention, attention_plan
from .plan import MAX_QUERY_LEN

__all__ = ["MAX_QUERY_LEN", "attention", "attention_plan"]
