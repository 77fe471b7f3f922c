"""tq's vLLM backend classes driven by hand, without vLLM's engine (needs vLLM importable).

The metadata builder and the layer implementation get the tensors vLLM would hand
them (CommonAttentionMetadata, the per-layer ``[blocks, kv heads, block size, slot]``
cache view in either head-major or token-major memory order) for mixed decode / verify /
prefill / continuation batches, and the output is checked against the reference.
"""

from __future__ import annotations

import dataclasses
import random
import types

import pytest
import torch
from tqv_helpers import Batch, Req, assert_matches_reference, make_batch, num_cache_blocks

import tq_core

pytest.importorskip("vllm")

from vllm.config import VllmConfig
from vllm.v1.attention.backend import AttentionCGSupport, CommonAttentionMetadata
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVQuantMode

from tq_vllm import _compat, _register, reset_stats, stats
from tq_vllm.backend import TQAttentionBackend, TQAttentionImpl, TQMetadataBuilder

HQ, HK, D = 8, 2, 64


@pytest.fixture(scope="module")
def vllm_config() -> VllmConfig:
    return VllmConfig()


def spec_for(preset: str, block_size: int) -> FullAttentionSpec:
    spec = FullAttentionSpec(
        block_size=block_size,
        num_kv_heads=HK,
        head_size=D,
        dtype=torch.uint8,
        kv_quant_mode=KVQuantMode[preset.upper()],
    )
    return TQAttentionBackend.customize_spec(spec)


def common_metadata(batch: Batch) -> CommonAttentionMetadata:
    qsl = batch.query_start_loc
    return CommonAttentionMetadata(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.cpu(),
        seq_lens=batch.seq_lens,
        num_reqs=len(batch.reqs),
        num_actual_tokens=batch.query.shape[0],  # includes padding tokens, as under CUDA graphs
        max_query_len=max(batch.q_lens()),
        max_seq_len=int(batch.seq_lens.max()),
        block_table_tensor=batch.block_table,
        slot_mapping=batch.slot_mapping,
        is_prefilling=batch.is_prefilling,
        seq_lens_cpu_upper_bound=batch.seq_lens.cpu(),
    )


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "turboquant_k8v4"])
@pytest.mark.parametrize("memory_order", ["token_major", "head_major"])
def test_builder_and_impl_on_mixed_batch(gen, seed, vllm_config, preset, memory_order):
    rng = random.Random(seed)
    bs = rng.choice([16, 32])
    reqs = [
        Req(rng.randint(1, 60), 1, False),  # decode
        Req(rng.randint(1, 60), 5, False),  # verify, 4 draft tokens
        Req(rng.randint(1, 60), 3, False),  # verify after a partial acceptance
        Req(rng.randint(1, 40), 2, True),  # prompt tail (short extend): still a prompt chunk
        Req(0, rng.randint(5, 30), True),  # first prefill chunk
        Req(rng.randint(1, 50), rng.randint(6, 30), True),  # chunked-prefill continuation / prefix hit
    ]
    slot = tq_core.get_preset(preset).layout(D).slot_size_aligned
    total = num_cache_blocks(reqs, bs)
    if memory_order == "token_major":  # vLLM layout LBNHC
        vllm_view = torch.empty(total, bs, HK, slot, dtype=torch.uint8).transpose(1, 2)
    else:  # LBHNC: the per-layer [B, H, N, C] view is contiguous
        vllm_view = torch.empty(total, HK, bs, slot, dtype=torch.uint8)
    batch = make_batch(gen, reqs, preset=preset, num_q_heads=HQ, num_kv_heads=HK, head_dim=D, block_size=bs,
                       cache=vllm_view.transpose(1, 2))  # fmt: skip

    vllm_config.speculative_config = types.SimpleNamespace(num_speculative_tokens=4, parallel_drafting=False)
    try:
        builder = TQMetadataBuilder(spec_for(preset, bs), ["model.layers.3.self_attn.attn"], vllm_config, "cpu")
    finally:
        vllm_config.speculative_config = None
    assert builder.reorder_batch_threshold == 5  # verify requests count as decodes
    meta = builder.build(0, common_metadata(batch))
    assert meta.plan.decode is not None and meta.plan.decode.num_verify_reqs == 2
    assert [c.req for c in meta.plan.chunks] == [3, 4, 5]

    impl = TQAttentionImpl(HQ, D, batch.scale, HK, kv_cache_dtype=preset)
    layer = types.SimpleNamespace(layer_name="model.layers.3.self_attn.attn")
    reset_stats()
    impl.do_kv_cache_update(layer, batch.key, batch.value, vllm_view, batch.slot_mapping)
    output = torch.full_like(batch.query, 5.0)
    impl.forward(layer, batch.query, batch.key, batch.value, vllm_view, meta, output=output)
    n = batch.num_tokens
    assert bool((output[n:] == 5.0).all()), "padding rows were written"
    assert_matches_reference(output[:n], batch, [not r.prefilling for r in reqs])
    s = stats()
    assert s["counts"]["store_calls"] == 1 and s["counts"]["decode_calls"] == 1 and s["counts"]["chunk_calls"] == 1
    assert s["layers"]["decode"] == ["model.layers.3.self_attn.attn"]


def test_bf16_layer_with_vllm_shaped_output(gen, vllm_config):
    """vLLM hands query [T, Hq, d] and an output buffer it later views as [T, Hq * d]."""
    reqs = [Req(9, 3, False), Req(0, 12, True)]
    batch = make_batch(gen, reqs, dtype=torch.bfloat16, num_q_heads=HQ, num_kv_heads=HK, head_dim=D)
    builder = TQMetadataBuilder(spec_for("turboquant_k3v4_nc", 16), ["l"], vllm_config, "cpu")
    meta = builder.build(0, common_metadata(batch))
    impl = TQAttentionImpl(HQ, D, batch.scale, HK, kv_cache_dtype="turboquant_k3v4_nc")
    view = batch.kv_cache.transpose(1, 2)
    impl.do_kv_cache_update(None, batch.key, batch.value, view, batch.slot_mapping)
    flat = torch.zeros(batch.query.shape[0], HQ * D, dtype=torch.bfloat16)
    impl.forward(None, batch.query, batch.key, batch.value, view, meta, output=flat.view(-1, HQ, D))
    n = batch.num_tokens
    assert_matches_reference(flat[:n].view(n, HQ, D), batch, [True, False], dtype=torch.bfloat16)


@pytest.mark.parametrize(
    "bad,match",
    [
        ("rows", "query_start_loc: ends at"),  # more query rows than the step has
        ("capacity", r"exceeds block_table capacity"),  # a seq_len past the block table
        ("q_len", r"q_len=3 exceeds seq_lens\[1\]=2"),  # more new tokens than the sequence
        ("order", "non-decreasing"),
    ],
)
def test_builder_checks_host_metadata(gen, vllm_config, bad, match):
    reqs = [Req(9, 1, False), Req(4, 3, False), Req(0, 12, True)]
    batch = make_batch(gen, reqs, num_q_heads=HQ, num_kv_heads=HK, head_dim=D)
    builder = TQMetadataBuilder(spec_for("turboquant_k3v4_nc", 16), ["l"], vllm_config, "cpu")
    cam = common_metadata(batch)
    builder.build(0, cam)  # valid
    sl, qsl = batch.seq_lens.clone(), batch.query_start_loc.clone()
    if bad == "rows":
        cam = dataclasses.replace(cam, num_actual_tokens=batch.num_tokens - 1)
    elif bad == "capacity":
        sl[0] = batch.block_table.shape[1] * 16 + 1
    elif bad == "q_len":
        sl[1] = 2
    else:
        qsl[1] = int(qsl[2]) + 1  # [0, 5, 4, 16]
    cam = dataclasses.replace(cam, query_start_loc_cpu=qsl, seq_lens_cpu_upper_bound=sl)
    with pytest.raises(tq_core.RangeError, match=match):
        builder.build(0, cam)


def test_builder_skips_the_host_check_without_host_seq_lens(gen, vllm_config):
    reqs = [Req(9, 1, False), Req(4, 3, False)]
    batch = make_batch(gen, reqs, num_q_heads=HQ, num_kv_heads=HK, head_dim=D)
    builder = TQMetadataBuilder(spec_for("turboquant_k3v4_nc", 16), ["l"], vllm_config, "cpu")
    cam = dataclasses.replace(common_metadata(batch), seq_lens_cpu_upper_bound=None)
    meta = builder.build(0, cam)
    assert meta.plan.decode is not None and meta.plan.decode.num_requests == 2


def test_profiling_run_without_metadata():
    impl = TQAttentionImpl(HQ, D, 0.1, HK, kv_cache_dtype="turboquant_4bit_nc")
    q = torch.randn(4, HQ, D)
    out = torch.full_like(q, 3.0)
    impl.forward(None, q, q[:, :HK], q[:, :HK], torch.empty(0, dtype=torch.uint8), None, output=out)
    assert bool((out == 0).all())


def test_customize_spec_keeps_vllm_page_size():
    for preset in tq_core.PRESETS:
        spec = spec_for(preset, 32)
        slot = tq_core.get_preset(preset).layout(D).slot_size_aligned
        assert spec.state_content_bytes == slot and spec.page_size_bytes == 32 * HK * slot
    plain = FullAttentionSpec(block_size=32, num_kv_heads=HK, head_size=D, dtype=torch.bfloat16)
    assert TQAttentionBackend.customize_spec(plain) is plain


def test_cudagraph_support_follows_verify_length(vllm_config, monkeypatch):
    spec = spec_for("turboquant_k8v4", 16)
    monkeypatch.setenv("TQ_VLLM_IMPL", "core")
    assert TQMetadataBuilder.get_cudagraph_support(vllm_config, spec) == AttentionCGSupport.NEVER
    monkeypatch.setenv("TQ_VLLM_IMPL", "triton")
    for k, expected in ((4, AttentionCGSupport.UNIFORM_BATCH), (20, AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE)):
        vllm_config.speculative_config = types.SimpleNamespace(num_speculative_tokens=k, parallel_drafting=False)
        try:
            assert TQMetadataBuilder.get_cudagraph_support(vllm_config, spec) == expected
        finally:
            vllm_config.speculative_config = None


def test_cudagraph_support_takes_triton_query_limit(vllm_config, monkeypatch):
    """The verify length that still fits one graph-captured call is tq-triton's max_query_len
    (16 only when tq-triton cannot load)."""
    from tq_core.contract import core_backend
    from tq_vllm import ops

    spec = spec_for("turboquant_k8v4", 16)
    monkeypatch.setenv("TQ_VLLM_IMPL", "triton")
    wide = dataclasses.replace(core_backend(), name="triton", max_query_len=32, takes_max_query_len=True)
    vllm_config.speculative_config = types.SimpleNamespace(num_speculative_tokens=20, parallel_drafting=False)
    try:
        monkeypatch.setattr(ops, "load_backend", lambda name: wide)
        assert TQMetadataBuilder.get_cudagraph_support(vllm_config, spec) == AttentionCGSupport.UNIFORM_BATCH

        def missing(name):
            raise tq_core.BackendUnavailableError(f"backend {name!r} is not installed")

        monkeypatch.setattr(ops, "load_backend", missing)
        expected = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE  # 21 > the fallback 16
        assert TQMetadataBuilder.get_cudagraph_support(vllm_config, spec) == expected
    finally:
        vllm_config.speculative_config = None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"head_size": 80}, tq_core.PresetError, "head_size=80"),
        ({"kv_cache_dtype": "auto"}, tq_core.PresetError, "not a TurboQuant preset"),
        ({"sliding_window": 256}, NotImplementedError, "sliding window"),
        ({"alibi_slopes": [0.5] * HQ}, NotImplementedError, "ALiBi"),
        ({"logits_soft_cap": 30.0}, NotImplementedError, "soft cap"),
        ({"sinks": torch.zeros(HQ)}, NotImplementedError, "sinks"),
    ],
)
def test_impl_rejects_what_it_cannot_serve(kwargs, error, match):
    args = {"num_heads": HQ, "head_size": D, "scale": 0.1, "num_kv_heads": HK, "kv_cache_dtype": "turboquant_k3v4_nc"}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        TQAttentionImpl(**args)


def test_version_check():
    for v in ("0.32.0", "0.32.0+cpu", "0.33.4", "0.33.1.dev12+gabcdef"):
        assert _compat.is_supported(v), v
    for v in ("0.31.9", "0.34.0", "0.34.0.dev1", "1.0.0", "garbage", ""):
        assert not _compat.is_supported(v), v
    assert "vllm>=0.32,<0.34" in _compat.unsupported_message("0.31.0")


@pytest.fixture
def clean_registration():
    _register._unregister()
    yield
    _register._unregister()


def _selector(kv: str, head_size: int = D, **kw):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    return AttentionSelectorConfig(head_size=head_size, dtype=torch.bfloat16, kv_cache_dtype=kv, block_size=None, **kw)


def test_cpu_platform_routing(clean_registration):
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    if not current_platform.is_cpu():
        pytest.skip("CPU build of vLLM only")
    cpu_attn = AttentionBackendEnum.CPU_ATTN.get_path()
    assert current_platform.get_attn_backend_cls(None, _selector("turboquant_k3v4_nc")) == cpu_attn  # vLLM alone
    assert _register.register()
    assert AttentionBackendEnum.TURBOQUANT.get_class() is TQAttentionBackend
    for preset in tq_core.PRESETS:
        assert current_platform.get_attn_backend_cls(None, _selector(preset)) == _register.BACKEND_PATH
    assert current_platform.get_attn_backend_cls(None, _selector("auto")) == cpu_attn  # boundary layers
    with pytest.raises(ValueError, match="head_size"):
        current_platform.get_attn_backend_cls(None, _selector("turboquant_k8v4", head_size=80))
    with pytest.raises(ValueError, match="sliding window"):
        current_platform.get_attn_backend_cls(None, _selector("turboquant_k8v4", has_sliding_window=True))
    assert _register.register()  # idempotent
    _register._unregister()
    assert current_platform.get_attn_backend_cls(None, _selector("turboquant_k3v4_nc")) == cpu_attn


def test_disable_switch_and_unsupported_version(clean_registration, monkeypatch):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    monkeypatch.setenv("TQ_VLLM_DISABLE", "1")
    assert not _register.register()
    assert not AttentionBackendEnum.TURBOQUANT.is_overridden()
    monkeypatch.delenv("TQ_VLLM_DISABLE")
    monkeypatch.setattr(_compat, "installed_vllm_version", lambda: "0.31.2")
    warnings: list[str] = []
    monkeypatch.setattr(_register.logger, "warning", lambda fmt, *a: warnings.append(fmt % a))
    assert not _register.register()
    assert not AttentionBackendEnum.TURBOQUANT.is_overridden()
    assert len(warnings) == 1 and "vLLM 0.31.2" in warnings[0] and ">=0.32,<0.34" in warnings[0]
    monkeypatch.setenv("TQ_VLLM_IGNORE_VERSION", "1")
    assert _register.register()
    assert AttentionBackendEnum.TURBOQUANT.is_overridden()


def test_selector_validation_messages():
    with pytest.raises(ValueError, match="dtype not supported"):
        TQAttentionBackend.check_selector_config(_selector_dtype(torch.int8))
    TQAttentionBackend.check_selector_config(_selector_dtype(torch.float32))


def _selector_dtype(dtype: torch.dtype):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    return AttentionSelectorConfig(head_size=D, dtype=dtype, kv_cache_dtype="turboquant_4bit_nc", block_size=32)


def test_calibrated_format_needs_a_backend_that_implements_it():
    """A calibrated format runs on a backend whose ``calibrated`` says it implements them
    (tq-core, tq-triton); any other is refused with an error naming both."""
    from tq_core.contract import core_backend
    from tq_vllm.backend import _check_choice_backend
    from tq_vllm.calibrated import FormatChoice

    choice = FormatChoice(tq_core.get_preset("tq_k4v3"), "unused.cal")
    core = core_backend()
    _check_choice_backend(choice, core)
    _check_choice_backend(None, dataclasses.replace(core, name="other", calibrated=False))
    with pytest.raises(tq_core.BackendUnavailableError, match=r"'other'.*tq_k4v3"):
        _check_choice_backend(choice, dataclasses.replace(core, name="other", calibrated=False))
