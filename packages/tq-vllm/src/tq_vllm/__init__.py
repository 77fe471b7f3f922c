"""tq-vllm: a vLLM plugin that serves the ``turboquant_*`` KV-cache dtypes with tq's kernels.

Importing this package is cheap and has no side effects. vLLM calls :func:`register`
(entry point ``vllm.general_plugins``) in every process; it overrides vLLM's
``TURBOQUANT`` attention backend with :class:`tq_vllm.backend.TQAttentionBackend` and,
on CPU builds of vLLM, routes ``turboquant_*`` layers to it.
"""

from .__about__ import __version__
from ._compat import SUPPORTED_VLLM, installed_vllm_version, is_supported
from ._stats import reset_stats, stats


def register() -> None:
    """vLLM plugin entry point: register tq's backend (see ``tq_vllm._register``)."""
    from ._register import register as _register

    _register()


__all__ = [
    "SUPPORTED_VLLM",
    "__version__",
    "installed_vllm_version",
    "is_supported",
    "register",
    "reset_stats",
    "stats",
]
