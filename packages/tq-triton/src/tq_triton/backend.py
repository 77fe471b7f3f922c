"""tq_triton as a tq backend (entry point ``tq.backends``: ``triton``)."""

from __future__ import annotations

from tq_core.contract import Backend

from .attention import MAX_QUERY_LEN, attention, attention_plan
from .device import interpreter_active
from .store import store


def triton_backend() -> Backend:
    """The Triton kernels: cuda and xpu tensors, and CPU tensors under ``TRITON_INTERPRET=1``
    (never picked automatically there)."""
    return Backend(
        name="triton",
        description="tq_triton (Triton kernels)",
        store=store,
        attention=attention,
        device_types=("cuda", "xpu", "cpu") if interpreter_active() else ("cuda", "xpu"),
        auto_device_types=("cuda", "xpu"),
        priority=10,
        max_query_len=MAX_QUERY_LEN,
        takes_max_query_len=True,
        calibrated=True,
        plan_attention=attention_plan,
    )
