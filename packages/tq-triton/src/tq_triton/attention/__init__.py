"""Attention over tq's paged compressed cache: decode and speculative verification.

- :mod:`.kernel`: the ``@triton.jit`` attention kernel and the split-merge kernel;
- :mod:`.tile`: jit helpers that load one K/V tile and attend to it;
- :mod:`.plan`: tile rows, kv splits and the tuning lookup of a call;
- :mod:`.launch`: :func:`attention`, the public entry point.
"""

from .launch import attention
from .plan import MAX_QUERY_LEN

__all__ = ["MAX_QUERY_LEN", "attention"]
