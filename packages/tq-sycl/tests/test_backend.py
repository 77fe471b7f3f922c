"""tq-sycl's entry points: the ``sycl`` backend and the ``tq info`` section."""

from __future__ import annotations

from importlib import metadata

import pytest

import tq_sycl
from tq_core.contract import load_backend, select_backend
from tq_core.errors import BackendUnavailableError
from tq_sycl import toolchain


def test_the_sycl_backend_is_registered_and_attention_only():
    backend = load_backend("sycl")
    assert backend.name == "sycl"
    assert backend.store is None  # tq-sycl has no store
    assert backend.attention is tq_sycl.attention
    assert backend.device_types == ("xpu",)
    assert not backend.picked_automatically_on("xpu")


def test_the_sycl_backend_is_never_the_automatic_choice():
    chosen, _ = select_backend("cpu", need_store=False)
    assert chosen.name != "sycl"
    with pytest.raises(BackendUnavailableError, match="runs on \\['xpu'\\]"):
        select_backend("cpu", "sycl", need_store=False)
    with pytest.raises(BackendUnavailableError, match="has no store"):
        select_backend("xpu", "sycl")


def test_tq_info_finds_the_toolchain_section():
    eps = [ep for ep in metadata.entry_points(group="tq.info") if ep.name == "sycl-toolchain"]
    assert len(eps) == 1
    assert eps[0].load() is toolchain.describe
