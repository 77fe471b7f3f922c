"""Attention over tq's paged compressed cache: decode and speculative verification.

- :mod:`.launch`: :func:`attention`, the public entry point: checks, plan, launch;
- :mod:`.plan`: tile rows, kv splits and the tuning lookup of a call;
- :mod:`.kernel`: the ``@triton.jit`` attention kernel (the portable one) and the split-merge
  kernel;
- :mod:`.tile`: jit helpers that load one K/V tile and attend to it;
- :mod:`.bounds`: one program's metadata, clamped, and its kv split, compiled by both
  attention kernels;
- :mod:`.gluon_kernel`: the attention kernel with explicit layouts (Gluon), NVIDIA GPUs only;
- :mod:`.gluon_launch`: where the Gluon kernel applies, its launch and its compile for sm_90.
"""

from .launch import attention
from .plan import MAX_QUERY_LEN

__all__ = ["MAX_QUERY_LEN", "attention"]
