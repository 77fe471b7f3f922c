"""Test setup: the device that can run the kernels, chosen before triton is imported.

- ``TQ_TEST_DEVICE`` (cpu, cuda, xpu) when set;
- else cpu when ``TRITON_INTERPRET=1`` is already set;
- else cuda or xpu when torch sees one;
- else cpu through Triton's interpreter.

The interpreter must be switched on before triton is imported (``triton.jit`` reads it when
the kernels are defined), so this runs first. Sizes scale with the device: small under the
interpreter (CI), real on a GPU. The choice is written back to ``TQ_TEST_DEVICE`` for the
helpers and printed in pytest's header. ``seed`` and ``gen`` come from tq-core's test kit.

``TQ_TEST_QUICK=1`` (the ``tests-triton`` nox session; ``tests-triton-full`` runs everything)
keeps, per test function, a cover of its parametrised cases: each value of each
``parametrize`` (a row, where one ``parametrize`` names several arguments) and of each
parametrised fixture in at least one kept case, not their product; the other cases are
deselected. Tests without parameters always run.
"""

from __future__ import annotations

import os

import pytest
import torch

from tq_core.testing.quick import deselect, in_folder, outside_cover, quick_enabled

pytest_plugins = ["tq_core.testing.plugin"]


def _pick_device() -> str:
    named = os.environ.get("TQ_TEST_DEVICE")
    if named:
        return named
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return "cpu"


DEVICE = _pick_device()
os.environ["TQ_TEST_DEVICE"] = DEVICE
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_report_header() -> str:
    how = "Triton interpreter" if DEVICE == "cpu" else "compiled kernels"
    return f"tq-triton tests on {DEVICE} ({how}); set TQ_TEST_DEVICE=cpu|cuda|xpu to choose"


@pytest.fixture
def device() -> torch.device:
    return torch.device(DEVICE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if quick_enabled():
        deselect(config, items, outside_cover(in_folder(items, __file__)))
