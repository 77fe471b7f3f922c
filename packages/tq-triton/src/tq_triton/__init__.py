"""tq-triton: fused Triton kernels for tq's paged TurboQuant cache (xpu and cuda).

``store`` and ``attention`` have the same names and signatures as in ``tq_core``; CPU
tensors run only under ``TRITON_INTERPRET=1`` (set before import), otherwise they raise.
``MAX_QUERY_LEN`` is the longest q_len per request the attention tiles are planned for.
Importing this package also registers ``torch.ops.tq.store``, ``torch.ops.tq.attention``
and ``torch.ops.tq.attention_out``.
"""

try:
    import triton  # noqa: F401
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        "tq_triton needs Triton, which comes with torch's CUDA and XPU builds (CPU builds have none): "
        "install the platform's torch build, or `pip install triton` to run the kernels on the CPU "
        "under TRITON_INTERPRET=1",
        name="triton",
    ) from exc

from . import torch_ops  # noqa: F401  (registers the torch operators)
from .__about__ import __version__
from .attention import MAX_QUERY_LEN, attention, attention_plan
from .store import store
from .tuning import AttentionConfig, StoreConfig, TuningError

__all__ = [
    "MAX_QUERY_LEN",
    "AttentionConfig",
    "StoreConfig",
    "TuningError",
    "__version__",
    "attention",
    "attention_plan",
    "store",
]
