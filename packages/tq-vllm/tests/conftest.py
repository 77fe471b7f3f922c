"""Shared fixtures for tq-vllm's tests.

``seed`` / ``gen`` come from tq-core's test kit plugin: a fresh seed per test, printed, so
a failing test's captured output shows ``seed=N``; rerun with ``TQ_TEST_SEED=N``.
``device`` covers CPU always, and cuda / xpu where present (the tq-triton path; such
machines need no vLLM for the planner and ops tests).

``TQ_TEST_QUICK=1`` (the ``tests-vllm`` nox session; ``tests-vllm-full`` runs everything):
of the end-to-end tests (test_e2e_vllm.py, one vLLM engine run of about a minute per
configuration) only :data:`QUICK_E2E` for :data:`QUICK_E2E_PRESET` (two engine runs, plain
and ngram speculative decoding) and :data:`QUICK_E2E_ALWAYS` (tq_k4v3 only, two more) run; of
the other parametrised tests, per test function, a cover of its cases: each value of each
``parametrize`` (a row, where one ``parametrize`` names several arguments) and of each
parametrised fixture in at least one kept case, not their product. The rest are
deselected; other tests always run.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tq_core.testing.quick import QUICK_ENV, deselect, in_folder, outside_cover, quick_enabled

pytest_plugins = ["tq_core.testing.plugin"]

torch.set_num_threads(min(2, torch.get_num_threads()))


def _devices() -> list[str]:
    devs = ["cpu"]
    if torch.cuda.is_available():
        devs.append("cuda")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        devs.append("xpu")
    return devs


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    dev = request.param
    if dev != "cpu" and importlib.util.find_spec("tq_triton") is None:
        pytest.skip(f"{dev}: tq-triton is not installed")
    return dev


E2E_MODULE = "test_e2e_vllm.py"
# the quick end-to-end subset: the codebook-key preset, plain and ngram speculative decoding
# (tq's decode and verify rows against the float64 reference, lossless against plain decoding,
# the backend on exactly the TurboQuant layers); the bf16 comparison, turboquant_k8v4 and the
# disable switch run in tests-vllm-full
QUICK_E2E = ("test_speculative_decoding_is_lossless", "test_backend_really_ran")
QUICK_E2E_PRESET = "turboquant_k3v4_nc"
# and tq's calibrated format through vLLM's additional config (two engine runs, tq_k4v3)
QUICK_E2E_ALWAYS = ("test_calibrated_format_through_additional_config",)
QUICK_E2E_FORMAT = "tq_k4v3"


def _quick_e2e(item: pytest.Item) -> bool:
    name = getattr(item, "originalname", item.name)
    params = getattr(item, "callspec", None)
    if name in QUICK_E2E_ALWAYS:
        return params is None or params.params.get("fmt", QUICK_E2E_FORMAT) == QUICK_E2E_FORMAT
    preset = params.params.get("preset") if params is not None else None
    return name in QUICK_E2E and preset == QUICK_E2E_PRESET


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not quick_enabled():
        return
    mine = in_folder(items, __file__)
    e2e = [item for item in mine if item.path.name == E2E_MODULE]
    if e2e and not any(_quick_e2e(item) for item in e2e):
        raise pytest.UsageError(f"{QUICK_ENV}: none of {QUICK_E2E} [{QUICK_E2E_PRESET}] is in {E2E_MODULE} any more")
    dropped = {id(item) for item in e2e if not _quick_e2e(item)}
    dropped |= outside_cover(item for item in mine if item.path.name != E2E_MODULE)
    deselect(config, items, dropped)
