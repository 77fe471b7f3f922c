"""The backend registry (``tq.backends`` entry points) and ``gather_kv`` of ``tq_core.contract``."""

from __future__ import annotations

import pytest
import torch
from tqc_helpers import PRESET_NAMES, FakeEntryPoint

import tq_core
from tq_core import BackendUnavailableError, RangeError, decode_kv, encode_kv
from tq_core.contract import (
    ENTRY_POINT_GROUP,
    Backend,
    backend_names,
    gather_kv,
    load_backend,
    select_backend,
)
from tq_core.testing import paged_batch


def _attention(*args, **kwargs) -> torch.Tensor:
    raise AssertionError("a fake backend's attention is never run here")


def _store(*args, **kwargs) -> None:
    raise AssertionError("a fake backend's store is never run here")


def fake_backend(name: str, priority: int, device_types=("cpu",), *, store=True, auto=None) -> Backend:
    return Backend(
        name=name,
        description=f"fake {name}",
        store=_store if store else None,
        attention=_attention,
        device_types=tuple(device_types),
        priority=priority,
        auto_device_types=auto,
    )


def ep(name: str, make) -> FakeEntryPoint:
    return FakeEntryPoint(name, f"tq_fake_{name}:backend", make)


# ---------------------------------------------------------------- registry


def test_core_is_always_installed(entry_points):
    entry_points(ENTRY_POINT_GROUP, [])
    assert backend_names() == ("core",)
    core = load_backend("core")
    assert isinstance(core, Backend) and core.name == "core"
    assert core.store is tq_core.store and core.attention is tq_core.attention
    assert set(core.device_types) >= {"cpu", "cuda", "xpu"}
    assert select_backend("cpu") == (core, [])


def test_names_are_listed_without_loading(entry_points):
    loaded = []

    def make() -> Backend:
        loaded.append(1)
        return fake_backend("zeta", 1)

    entry_points(ENTRY_POINT_GROUP, [ep("zeta", make), ep("alpha", make)])
    assert backend_names() == ("alpha", "core", "zeta")
    assert loaded == []
    assert load_backend("zeta").name == "zeta" and loaded == [1]


def test_unknown_name_lists_the_installed_ones(entry_points):
    entry_points(ENTRY_POINT_GROUP, [ep("fast", lambda: fake_backend("fast", 5))])
    with pytest.raises(BackendUnavailableError, match=r"'nope' is not installed.*\['core', 'fast'\]"):
        load_backend("nope")


def _raise_import() -> Backend:
    raise ModuleNotFoundError("No module named 'triton'")


class BrokenLoad(FakeEntryPoint):
    def load(self):
        raise ImportError("cannot import tq_fake_broken")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            ep("broken", _raise_import),
            r"'broken' \(tq_fake_broken:backend\) cannot load: ModuleNotFoundError: .*triton",
        ),
        (
            BrokenLoad("broken", "tq_fake_broken:backend", _raise_import),
            r"'broken' \(tq_fake_broken:backend\) cannot load: ImportError: cannot import tq_fake_broken",
        ),
        (ep("broken", lambda: {"name": "broken"}), r"'broken': tq_fake_broken:backend returned dict, not a Backend"),
    ],
    ids=["factory-raises", "load-raises", "not-a-backend"],
)
def test_a_backend_that_cannot_load_is_named(entry_points, entry, message):
    entry_points(ENTRY_POINT_GROUP, [entry])
    with pytest.raises(BackendUnavailableError, match=message):
        load_backend("broken")
    # automatic selection passes over it, says why, and falls back to core
    backend, skipped = select_backend("cpu")
    assert backend.name == "core"
    assert len(skipped) == 1 and "'broken'" in skipped[0]


def test_unavailable_error_from_the_factory_passes_through(entry_points):
    def make() -> Backend:
        raise BackendUnavailableError("tq-sycl: no XPU device")

    entry_points(ENTRY_POINT_GROUP, [ep("sycl", make)])
    with pytest.raises(BackendUnavailableError, match=r"^tq-sycl: no XPU device$"):
        load_backend("sycl")


def test_auto_picks_the_highest_priority_that_runs_there(entry_points):
    entry_points(
        ENTRY_POINT_GROUP,
        [
            ep("low", lambda: fake_backend("low", 1, ("cpu", "cuda"))),
            ep("high", lambda: fake_backend("high", 9, ("cuda",))),
            ep("mid", lambda: fake_backend("mid", 5, ("cuda", "xpu"))),
        ],
    )
    assert select_backend("cuda")[0].name == "high"
    assert select_backend(torch.device("xpu", 1))[0].name == "mid"
    assert select_backend("cpu")[0].name == "low"


def test_auto_honours_auto_device_types(entry_points):
    # runs on CPU tensors (as tq-triton does under Triton's interpreter) but is no automatic CPU choice
    entry_points(ENTRY_POINT_GROUP, [ep("interp", lambda: fake_backend("interp", 9, ("cpu", "cuda"), auto=("cuda",)))])
    assert select_backend("cpu")[0].name == "core"
    assert select_backend("cuda")[0].name == "interp"
    assert select_backend("cpu", "interp")[0].name == "interp"  # asked for by name, it runs


def test_need_store(entry_points):
    entry_points(ENTRY_POINT_GROUP, [ep("readonly", lambda: fake_backend("readonly", 9, store=False))])
    assert select_backend("cpu")[0].name == "core"
    assert select_backend("cpu", need_store=False)[0].name == "readonly"
    assert select_backend("cpu", "readonly", need_store=False)[0].name == "readonly"
    with pytest.raises(BackendUnavailableError, match="'readonly' has no store"):
        select_backend("cpu", "readonly")


def test_named_backend_on_another_device_raises(entry_points):
    entry_points(ENTRY_POINT_GROUP, [ep("gpu", lambda: fake_backend("gpu", 9, ("cuda",)))])
    with pytest.raises(BackendUnavailableError, match=r"'gpu' runs on \['cuda'\], not on 'cpu' tensors"):
        select_backend("cpu", "gpu")
    with pytest.raises(BackendUnavailableError, match="not installed"):
        select_backend("cpu", "missing")


# ---------------------------------------------------------------- gather_kv


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("unused", ["garbage", "real"])
def test_gather_kv_decodes_the_request_tokens(gen, name, unused):
    seq_lens = [37, 1, 16, 0]
    b = paged_batch(gen, name, seq_lens, [0] * 4, head_dim=64, num_kv_heads=3, group=1, unused=unused)
    # the same tokens through vLLM's slot format: encode_kv then decode_kv
    k_ref, v_ref = decode_kv(encode_kv(b.key, b.value, name), name, 64)
    t0 = 0
    for r, s in enumerate(seq_lens):
        for head_dim in (None, 64):
            k, v = gather_kv(b.kv_cache, b.block_table[r], s, name, head_dim)
            assert k.shape == v.shape == (s, 3, 64) and k.dtype == v.dtype == torch.float32
            assert torch.equal(k, k_ref[t0 : t0 + s]) and torch.equal(v, v_ref[t0 : t0 + s])
        for prefix in (s // 2, max(s - 1, 0)):  # the first tokens only
            k, _ = gather_kv(b.kv_cache, b.block_table[r], prefix, name)
            assert torch.equal(k, k_ref[t0 : t0 + prefix])
        t0 += s


@pytest.mark.parametrize("length", [-1, 2 * 16 + 1, True, 3.0, None])
def test_gather_kv_bad_length_raises(gen, length):
    b = paged_batch(gen, "turboquant_k3v4_nc", [20], [1], head_dim=64, num_kv_heads=1, group=1)
    row = b.block_table[0, :2]  # capacity 2 blocks of 16
    gather_kv(b.kv_cache, row, 32, b.preset)  # the whole capacity is fine
    with pytest.raises(RangeError, match="length="):
        gather_kv(b.kv_cache, row, length, b.preset)
