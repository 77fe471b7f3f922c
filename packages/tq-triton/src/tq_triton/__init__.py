"""tq-triton: fused Triton kernels for tq's paged TurboQuant cache (xpu and cuda).

``store`` and ``attention`` have the same names and signatures as in ``tq_core``; CPU
tensors run only under ``TRITON_INTERPRET=1`` (set before import), otherwise they raise.
"""

from .__about__ import __version__
from .attention import attention
from .store import store

__all__ = ["__version__", "attention", "store"]
