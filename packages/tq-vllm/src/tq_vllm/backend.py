"""tq's attention backend for vLLM's ``turboquant_*`` KV-cache dtypes (vLLM 0.32 / 0.33).

It owns both halves of the cache: ``do_kv_cache_update`` stores with the selected tq
backend's ``store`` (tq-triton on cuda/xpu, tq-core on CPU; see :mod:`tq_vllm.ops`) and
``forward`` reads with the same backend's ``attention`` (tq arranges the bytes inside each
block its own way, so vLLM's TurboQuant kernels must never see this cache). vLLM imports
this module only when it resolves the ``TURBOQUANT`` backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
from vllm.config import VllmConfig
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheLayout

from tq_core import (
    PRESETS,
    SUPPORTED_HEAD_DIMS,
    BackendUnavailableError,
    DtypeError,
    LayerCalibration,
    Preset,
    PresetError,
    get_preset,
)
from tq_core.contract import Backend, check_host_metadata

from . import _env, _stats
from .calibrated import FormatChoice, format_choice, token_positions
from .ops import LayerStep, query_len_limit, run_batch, select_kernels, tq_cache_view, triton_query_len_limit
from .plan import BatchPlan, plan_batch

KV_CACHE_DTYPES = tuple(PRESETS)

# the calibrated format of this process's vLLM config, as last seen (customize_spec may run
# where vLLM's current config is not set)
_seen_choice: list[FormatChoice | None] = [None]


def current_choice(vllm_config: VllmConfig | None = None) -> FormatChoice | None:
    """The calibrated format named in vLLM's additional config (tq_vllm.calibrated), if any."""
    if vllm_config is None:
        from vllm.config import get_current_vllm_config_or_none

        vllm_config = get_current_vllm_config_or_none()
    if vllm_config is None:
        return _seen_choice[0]
    choice = format_choice(getattr(vllm_config, "additional_config", None))
    _seen_choice[0] = choice
    return choice


def _check_choice_backend(choice: FormatChoice | None, backend: Backend) -> None:
    if choice is not None and not backend.calibrated:
        raise BackendUnavailableError(
            f"tq-vllm: backend {backend.name!r} does not implement the calibrated format {choice.preset.name}: "
            "use tq-triton or tq-core (TQ_VLLM_IMPL=triton or core)"
        )


def _tp_rank_size() -> tuple[int, int]:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    except (ImportError, AssertionError, RuntimeError):  # no process group: one rank
        return 0, 1


def _max_decode_query_len(vllm_config: VllmConfig) -> int:
    """1 + num_speculative_tokens (vLLM's own helper where it has one)."""
    try:
        from vllm.v1.attention.backend import max_decode_query_len
    except ImportError:
        spec = getattr(vllm_config, "speculative_config", None)
        k = getattr(spec, "num_speculative_tokens", None)
        return 1 if k is None else 1 + int(k)
    return max_decode_query_len(vllm_config)


class TQAttentionBackend(AttentionBackend):
    """Attention over tq's paged TurboQuant cache; registered as vLLM's ``TURBOQUANT``."""

    accept_output_buffer: bool = True
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[Any]] = list(KV_CACHE_DTYPES)

    @staticmethod
    def get_name() -> str:
        # the enum member we override; vLLM maps names back to members in places
        return "TURBOQUANT"

    @staticmethod
    def get_impl_cls() -> type[TQAttentionImpl]:
        return TQAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[TQMetadataBuilder]:
        return TQMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[int | MultipleOf]:
        return [16, 32, 64, 128]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(SUPPORTED_HEAD_DIMS)

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype: Any) -> bool:
        return kv_cache_dtype in KV_CACHE_DTYPES

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # any layout whose per-layer blocks are dense byte ranges (tq arranges the inside)
        return (KVCacheLayout.LBNHC, KVCacheLayout.LBHNC, KVCacheLayout.BLNHC, KVCacheLayout.BLHNC)

    @classmethod
    def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:
        """One packed slot per (token, kv head): vLLM's slot size, so memory accounting holds."""
        if spec.state_content_bytes is not None or not spec.kv_quant_mode.is_turboquant:
            return spec
        dtype = spec.kv_quant_mode.name.lower()
        preset = get_preset(dtype)
        choice = current_choice()
        if choice is not None:  # a calibrated format: its own (smaller) slot, in vLLM's accounting too
            choice.check_carrier(dtype, spec.head_size)
            preset = choice.preset
        return replace(spec, state_content_bytes=preset.layout(spec.head_size).slot_size_aligned)

    @classmethod
    def check_selector_config(cls, cfg: Any) -> None:
        """Raise a clear error when tq cannot serve a layer (used on CPU, which does not validate)."""
        reasons = cls.validate_configuration(
            head_size=cfg.head_size,
            dtype=cfg.dtype,
            kv_cache_dtype=cfg.kv_cache_dtype,
            block_size=cfg.block_size,
            use_mla=cfg.use_mla,
            has_sink=cfg.has_sink,
            use_sparse=cfg.use_sparse,
            use_mm_prefix=cfg.use_mm_prefix,
            use_per_head_quant_scales=cfg.use_per_head_quant_scales,
            device_capability=None,  # type: ignore[arg-type]
            attn_type=cfg.attn_type,
            has_sliding_window=cfg.has_sliding_window,
            use_non_causal=cfg.use_non_causal,
            use_batch_invariant=False,
            use_kv_connector=False,
            use_pcp=cfg.use_pcp,
            use_dcp=cfg.use_dcp,
            use_rswa=cfg.use_rswa,
        )
        if reasons:
            raise ValueError(
                f"tq-vllm cannot serve kv_cache_dtype={cfg.kv_cache_dtype!r} for this layer "
                f"(head_size={cfg.head_size}, dtype={cfg.dtype}): {'; '.join(reasons)}. "
                f"tq supports head sizes {list(SUPPORTED_HEAD_DIMS)}, dtypes fp16/bf16/fp32, decoder "
                "attention without sliding window, sinks or ALiBi. Use another --kv-cache-dtype, "
                "or TQ_VLLM_DISABLE=1 to fall back to vLLM's own TurboQuant backend."
            )


@dataclass
class TQMetadata(AttentionMetadata):
    """Per-batch metadata shared by all tq layers of a KV-cache group."""

    num_actual_tokens: int
    num_reqs: int
    max_query_len: int
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    plan: BatchPlan
    positions: torch.Tensor | None = None  # per slot_mapping row, its token's position; calibrated formats only
    # the step's attention launch plans by call geometry: made at the step's first layer, reused by the rest
    launch_plans: dict = field(default_factory=dict)


class TQMetadataBuilder(AttentionMetadataBuilder[TQMetadata]):
    """Splits each batch into one decode/verify attention call and prompt chunks (see plan.py)."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    @classmethod
    def get_cudagraph_support(cls, vllm_config: VllmConfig, kv_cache_spec: Any) -> AttentionCGSupport:
        # uniform decode/verify batches are graph-safe while one attention call takes them
        # whole (up to tq-triton's max_query_len per request); longer verify batches are cut
        # into pieces at build time, which allocates, so only single-token decode is captured
        # then. tq-core (the CPU path, or TQ_VLLM_IMPL=core) reads metadata on the host: never
        # captured.
        if _env.impl_choice() == "core":
            return AttentionCGSupport.NEVER
        limit = triton_query_len_limit()
        if limit is not None and _max_decode_query_len(vllm_config) > limit:
            return AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
        return AttentionCGSupport.UNIFORM_BATCH

    def __init__(
        self, kv_cache_spec: AttentionSpec, layer_names: list[str], vllm_config: VllmConfig, device: torch.device
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # verify requests (q_len = 1 + num_speculative_tokens) are decodes for us
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)
        self.backend: Backend = select_kernels(device)
        self.choice = current_choice(vllm_config)
        _check_choice_backend(self.choice, self.backend)
        # calibrated formats: each slot_mapping row's position, in one buffer that lives as
        # long as the builder, so that a captured CUDA graph reads this step's values
        self._positions: torch.Tensor | None = None
        if self.choice is not None:
            rows = getattr(getattr(vllm_config, "scheduler_config", None), "max_num_batched_tokens", None) or 8192
            self._positions = torch.zeros(int(rows), dtype=torch.int32, device=device)
        model_config = vllm_config.model_config
        dtype = getattr(model_config, "dtype", None)
        if dtype is not None and dtype not in TQAttentionBackend.supported_dtypes:
            raise DtypeError(f"tq-vllm: model dtype {dtype} is not supported: expected float16, bfloat16 or float32")

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> TQMetadata:
        cam = common_attn_metadata
        seq_lens_cpu = getattr(cam, "seq_lens_cpu_upper_bound", None)
        if seq_lens_cpu is not None:
            # vLLM's host copies, checked on the host once per step (no device read, no sync,
            # nothing allocated on the device: safe under CUDA graphs). The seq_lens are an
            # upper bound (exact except for async speculative decode rows), which vLLM keeps
            # within the blocks it allocated, so the capacity check holds for it too.
            check_host_metadata(
                seq_lens_cpu[: cam.num_reqs],
                cam.query_start_loc_cpu[: cam.num_reqs + 1],
                num_query_rows=cam.num_actual_tokens,
                block_table_width=cam.block_table_tensor.shape[1],
                block_size=self.kv_cache_spec.block_size,
            )
        plan = plan_batch(
            num_reqs=cam.num_reqs,
            query_start_loc=cam.query_start_loc,
            query_start_loc_cpu=cam.query_start_loc_cpu,
            seq_lens=cam.seq_lens,
            block_table=cam.block_table_tensor,
            decode_threshold=self.reorder_batch_threshold or 1,
            max_q_len=query_len_limit(self.backend),
            is_prefilling=getattr(cam, "is_prefilling", None),
            seq_lens_cpu=getattr(cam, "seq_lens_cpu_upper_bound", None),
        )
        _stats.bump("builds")
        if plan.decode is not None:
            _stats.bump("decode_reqs", plan.decode.num_requests)
            _stats.bump("verify_reqs", plan.decode.num_verify_reqs)
            _stats.note_max("decode_q_len", plan.decode.max_request_q_len)
        _stats.bump("chunk_reqs", len(plan.chunks))
        _stats.bump("chunk_reqs_with_context", sum(1 for c in plan.chunks if c.context_len > 0))
        positions = None
        if self._positions is not None:
            host_lens = seq_lens_cpu if seq_lens_cpu is not None else cam.seq_lens[: cam.num_reqs].cpu()
            rows = token_positions(cam.query_start_loc_cpu, host_lens, cam.num_reqs)
            # one entry per slot_mapping row; padding rows (never stored) get 0
            n = cam.slot_mapping.shape[0]
            if n > self._positions.shape[0]:  # more rows than vLLM's token budget: grow once
                self._positions = torch.zeros(n, dtype=torch.int32, device=self._positions.device)
            host = torch.zeros(n, dtype=torch.int32)
            host[: rows.shape[0]] = rows[:n]
            positions = self._positions[:n]
            positions.copy_(host)
        return TQMetadata(
            num_actual_tokens=cam.num_actual_tokens,
            num_reqs=cam.num_reqs,
            max_query_len=cam.max_query_len,
            block_table=cam.block_table_tensor,
            slot_mapping=cam.slot_mapping,
            plan=plan,
            positions=positions,
        )


class TQAttentionImpl(AttentionImpl[TQMetadata]):
    """Store and attention for one layer with a ``turboquant_*`` cache."""

    supports_quant_query_input: bool = False

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise PresetError(
                f"tq-vllm: kv_cache_dtype={kv_cache_dtype!r} is not a TurboQuant preset: expected one of "
                f"{list(KV_CACHE_DTYPES)}"
            )
        self.preset: Preset = get_preset(kv_cache_dtype)
        self.choice = current_choice()
        if self.choice is not None:
            self.choice.check_carrier(kv_cache_dtype, head_size)
            self.preset = self.choice.preset
        self.preset.check_head_dim(head_size, "head_size")
        self._layer_cal: LayerCalibration | None = None  # resolved at the first call (it needs the layer's name)
        unsupported = {
            "ALiBi": alibi_slopes is not None,
            "sliding window": sliding_window is not None,
            "logits soft cap": bool(logits_soft_cap),
            f"attention type {attn_type}": attn_type != AttentionType.DECODER,
            "cross-layer KV sharing": kv_sharing_target_layer_name is not None,
            "attention sinks": kwargs.get("sinks") is not None,
        }
        bad = [name for name, hit in unsupported.items() if hit]
        if bad:
            raise NotImplementedError(
                f"tq-vllm ({kv_cache_dtype}) does not support {', '.join(bad)}; "
                "use another --kv-cache-dtype or TQ_VLLM_DISABLE=1"
            )
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads if num_kv_heads is not None else num_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        self.kv_cache_dtype = kv_cache_dtype
        self.sliding_window = None
        self.alibi_slopes = None
        self.logits_soft_cap = None
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = None
        self._backends: dict[str, Backend] = {}

    def _backend_for(self, device: torch.device) -> Backend:
        b = self._backends.get(device.type)
        if b is None:
            b = self._backends[device.type] = select_kernels(device)
            _check_choice_backend(self.choice, b)
        return b

    def calibration_for(self, layer: Any, device: torch.device) -> LayerCalibration | None:
        """This layer's calibration (its kv heads on this rank), for a calibrated format."""
        if self.choice is None:
            return None
        if self._layer_cal is None:  # one impl per layer, on one device
            rank, size = _tp_rank_size()
            name = getattr(layer, "layer_name", None)
            self._layer_cal = self.choice.layer_calibration(name, self.num_kv_heads, self.head_size, rank, size, device)
        return self._layer_cal

    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Encode the step's new K/V into the paged cache (padding slots are negative and skipped)."""
        n = slot_mapping.shape[0]
        if n == 0 or kv_cache.numel() == 0:
            return
        store = self._backend_for(key.device).store
        assert store is not None  # select_kernels asks for a backend with a store
        extra: dict[str, Any] = {}
        cal = self.calibration_for(layer, key.device)
        if cal is not None:
            extra = {"calibration": cal, "positions": self._positions(layer, n)}
        store(key[:n], value[:n], tq_cache_view(kv_cache), slot_mapping, self.preset, **extra)
        _stats.bump("store_calls")
        _stats.bump("stored_tokens", n)
        _stats.note_layer("store", getattr(layer, "layer_name", None))

    @staticmethod
    def _positions(layer: Any, n: int) -> torch.Tensor:
        """The positions of the step's first ``n`` slot_mapping rows (the builder's)."""
        from vllm.forward_context import get_forward_context

        md = get_forward_context().attn_metadata
        if isinstance(md, dict):
            md = md[layer.layer_name]
        pos = getattr(md, "positions", None)
        if pos is None:
            raise PresetError("tq-vllm: a calibrated format needs the batch's positions (TQMetadata.positions)")
        return pos[:n]

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: TQMetadata,
        output: torch.Tensor | None = None,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tq-vllm does not fuse output quantization")
        if output is None:
            output = torch.empty(query.shape[0], self.num_heads, self.head_size, dtype=query.dtype, device=query.device)
        if attn_metadata is None or kv_cache.numel() == 0:  # profiling run
            return output.fill_(0)
        plan = attn_metadata.plan
        step = LayerStep(
            query=query.view(-1, self.num_heads, self.head_size),
            key=None if key is None else key.view(-1, self.num_kv_heads, self.head_size),
            value=None if value is None else value.view(-1, self.num_kv_heads, self.head_size),
            kv_cache=tq_cache_view(kv_cache),
            block_table=attn_metadata.block_table,
            preset=self.preset,
            scale=self.scale,
            output=output.view(-1, self.num_heads, self.head_size),
            calibration=self.calibration_for(layer, query.device),
            launch_plans=attn_metadata.launch_plans,
        )
        run_batch(self._backend_for(query.device), plan, step)
        name = getattr(layer, "layer_name", None)
        if plan.decode is not None:
            _stats.bump("decode_calls")
            _stats.note_layer("decode", name)
        if plan.chunks:
            _stats.bump("chunk_calls")
            _stats.note_layer("chunk", name)
        return output
