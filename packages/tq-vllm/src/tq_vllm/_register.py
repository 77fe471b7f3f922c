"""Registration with vLLM: the backend override and the CPU platform route.

vLLM hooks used (0.32 / 0.33):

- ``vllm.v1.attention.backends.registry.register_backend(AttentionBackendEnum.TURBOQUANT,
  path)``: the CUDA, ROCm and XPU platforms pick the ``TURBOQUANT`` member for
  ``turboquant_*`` cache dtypes; the override makes that member resolve to our class.
- The CPU platform's ``get_attn_backend_cls`` returns ``CPU_ATTN`` for every non-MLA
  layer whatever the cache dtype. We wrap that classmethod so that layers whose
  ``kv_cache_dtype`` is a ``turboquant_*`` preset get ``TURBOQUANT`` (our class);
  every other layer, including the bf16 boundary layers, goes through the original.
"""

from __future__ import annotations

import logging
from typing import Any

from . import _compat, _env

# A child of vLLM's "vllm" logger, so messages use vLLM's handlers and format.
logger = logging.getLogger("vllm.tq_vllm")

BACKEND_PATH = "tq_vllm.backend.TQAttentionBackend"
_PATCH_MARK = "_tq_vllm_original_get_attn_backend_cls"

_registered = False


def register() -> bool:
    """Register tq's backend; returns whether it is active. Safe to call repeatedly."""
    global _registered
    if _registered:
        return True
    if _env.disabled():
        logger.info("tq-vllm: TQ_VLLM_DISABLE is set; not registering (vLLM's own backends run).")
        return False
    version = _compat.installed_vllm_version()
    if version is None or not _compat.is_supported(version):
        if not _env.ignore_version():
            logger.warning("%s", _compat.unsupported_message(version))
            return False
        logger.warning("tq-vllm: TQ_VLLM_IGNORE_VERSION is set; registering on vLLM %s (untested).", version)

    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.TURBOQUANT, BACKEND_PATH)
    _patch_cpu_platform()
    _registered = True
    logger.info("tq-vllm: TURBOQUANT attention backend -> %s", BACKEND_PATH)
    return True


def _unregister() -> None:
    """Undo :func:`register` (tests only)."""
    global _registered
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    AttentionBackendEnum.TURBOQUANT.clear_override()
    from vllm.platforms import current_platform

    cls = type(current_platform)
    if _PATCH_MARK in cls.__dict__:
        original = cls.__dict__[_PATCH_MARK]
        if original is None:  # the method was inherited: drop our override
            delattr(cls, "get_attn_backend_cls")
        else:
            cls.get_attn_backend_cls = original
        delattr(cls, _PATCH_MARK)
    _registered = False


def _patch_cpu_platform() -> None:
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    cls = type(current_platform)
    if _PATCH_MARK in cls.__dict__:
        return
    original_attr = cls.__dict__.get("get_attn_backend_cls")  # None when inherited
    original_bound = cls.get_attn_backend_cls

    def get_attn_backend_cls(
        klass: type, selected_backend: Any, attn_selector_config: Any, num_heads: int | None = None
    ) -> str:
        kv = getattr(attn_selector_config, "kv_cache_dtype", None)
        if isinstance(kv, str) and kv.startswith("turboquant_") and not attn_selector_config.use_mla:
            from vllm.v1.attention.backends.registry import AttentionBackendEnum

            from .backend import TQAttentionBackend

            TQAttentionBackend.check_selector_config(attn_selector_config)
            logger.info("tq-vllm: using tq's TurboQuant backend for kv_cache_dtype=%s on CPU.", kv)
            return AttentionBackendEnum.TURBOQUANT.get_path()
        return original_bound(selected_backend, attn_selector_config, num_heads)

    setattr(cls, _PATCH_MARK, original_attr)
    cls.get_attn_backend_cls = classmethod(get_attn_backend_cls)  # type: ignore[method-assign, assignment]
