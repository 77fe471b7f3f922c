"""Benchmark cases and timers shared by ``tq bench``, ``tq sweep`` and the device scripts.

A case is a named shape (batch, heads, head_dim, sequence and query lengths); building
it fills a paged cache through ``tq_triton.store`` with bf16 keys and values of LLM-like
statistics (``tq_core.synthetic.SyntheticKV``), over a shuffled block table as a
long-running server has (``tq_core.testing.block_tables``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from tq_core import LayerCalibration, get_preset
from tq_core.synthetic import SyntheticKV
from tq_core.testing import block_tables, random_calibration

from .attention import attention, attention_plan
from .attention.plan import LaunchPlan
from .store import store


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    q_heads: int
    kv_heads: int
    head_dim: int
    seq_len: int
    q_len: int = 1
    # optional per-request q_lens / seq_lens (ragged); lengths default to q_len / seq_len
    q_lens: tuple[int, ...] | None = None
    seq_lens: tuple[int, ...] | None = None
    block_size: int = 16

    def request_q_lens(self) -> list[int]:
        return list(self.q_lens) if self.q_lens else [self.q_len] * self.batch

    def request_seq_lens(self) -> list[int]:
        return list(self.seq_lens) if self.seq_lens else [self.seq_len] * self.batch


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("poc", batch=4, q_heads=32, kv_heads=4, head_dim=128, seq_len=8192, q_len=8),
        Shape("decode-32k", batch=32, q_heads=32, kv_heads=8, head_dim=128, seq_len=32768, q_len=1),
        Shape("verify-32k", batch=8, q_heads=32, kv_heads=8, head_dim=128, seq_len=32768, q_len=8),
        # speculative verification of 1, 3 and 15 draft tokens on verify-32k's batch
        *(
            Shape(f"verify-32k-q{q}", batch=8, q_heads=32, kv_heads=8, head_dim=128, seq_len=32768, q_len=q)
            for q in (2, 4, 16)
        ),
        # decode at a small model's geometry (SmolLM2: 9 q / 3 kv heads of head_dim 64), and
        # verification of 15 draft tokens there
        Shape("decode-d64", batch=32, q_heads=9, kv_heads=3, head_dim=64, seq_len=8192, q_len=1),
        Shape("verify-d64-q16", batch=32, q_heads=9, kv_heads=3, head_dim=64, seq_len=8192, q_len=16),
        # head_dim 256 (Gemma-style heads): decode and verification of 3 draft tokens
        *(
            Shape(name, batch=8, q_heads=32, kv_heads=8, head_dim=256, seq_len=32768, q_len=q)
            for name, q in (("decode-d256", 1), ("verify-d256-q4", 4))
        ),
        Shape(
            "ragged",
            batch=8,
            q_heads=32,
            kv_heads=8,
            head_dim=128,
            seq_len=16384,
            q_lens=(1, 8, 1, 3, 5, 1, 2, 7),
            seq_lens=(16384, 9001, 30000, 517, 12345, 4099, 20000, 2048),
        ),
    )
}


@dataclass
class Case:
    shape: Shape
    preset: str
    query: torch.Tensor
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    scale: float
    max_query_len: int
    # dense bf16 K/V [batch, kv_heads, max_seq, head_dim] for the bf16 baseline (optional)
    dense_k: torch.Tensor | None = None
    dense_v: torch.Tensor | None = None
    # calibrated formats: the layer calibration the cache was stored against
    calibration: LayerCalibration | None = None

    def extra(self) -> dict[str, LayerCalibration]:
        """``attention``'s keyword arguments beyond the metadata: the calibration, if any."""
        return {} if self.calibration is None else {"calibration": self.calibration}

    @property
    def cache_bytes_read(self) -> int:
        """Compressed bytes one attention call must read (each cached token's slots once)."""
        lay = get_preset(self.preset).layout(self.shape.head_dim)
        return sum(self.shape.request_seq_lens()) * self.shape.kv_heads * lay.slot_size_aligned

    @property
    def bf16_bytes_read(self) -> int:
        return sum(self.shape.request_seq_lens()) * self.shape.kv_heads * self.shape.head_dim * 2 * 2


def build_case(shape: Shape, preset: str, device: torch.device, seed: int = 0, dense: bool = False) -> Case:
    """The shape's batch: :class:`tq_core.synthetic.SyntheticKV` keys, values and queries (bf16),
    stored by ``tq_triton.store`` over the shuffled blocks of ``tq_core.testing.block_tables``.
    ``dense`` also keeps the bf16 K/V for the bf16 baselines. A calibrated format is stored
    against ``tq_core.testing.random_calibration`` (timing does not depend on its values)."""
    gen = torch.Generator().manual_seed(seed)
    bs = shape.block_size
    seq = shape.request_seq_lens()
    qls = shape.request_q_lens()
    p = get_preset(preset)
    num_blocks, table, slots = block_tables(gen, seq, bs, spare_blocks=0, unused="real")
    slot = p.layout(shape.head_dim).slot_size_aligned
    cache = torch.zeros(num_blocks, bs, shape.kv_heads, slot, dtype=torch.uint8, device=device)
    syn = SyntheticKV(shape.kv_heads, shape.head_dim, seed=seed)
    dk = dv = None
    if dense:
        dk = torch.zeros(shape.batch, shape.kv_heads, max(seq), shape.head_dim, dtype=torch.bfloat16, device=device)
        dv = torch.zeros_like(dk)
    cal = random_calibration(gen, shape.kv_heads, shape.head_dim).to(device) if p.calibrated else None
    first = 0
    for r, s in enumerate(seq):
        k, v = syn.kv(s, device=device, dtype=torch.bfloat16, on_device=True)
        extra = {} if cal is None else {"calibration": cal, "positions": torch.arange(s, device=device)}
        store(k, v, cache, slots[first : first + s].to(device), p, **extra)
        first += s
        if dense:
            dk[r, :, :s] = k.transpose(0, 1)
            dv[r, :, :s] = v.transpose(0, 1)
    query = syn.query(sum(qls), shape.q_heads, device=device, dtype=torch.bfloat16)
    qsl = torch.tensor([0, *torch.tensor(qls).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return Case(
        shape=shape,
        preset=preset,
        query=query,
        kv_cache=cache,
        block_table=table.to(device),
        seq_lens=torch.tensor(seq, dtype=torch.int32, device=device),
        query_start_loc=qsl,
        scale=shape.head_dim**-0.5,
        max_query_len=max(qls),
        dense_k=dk,
        dense_v=dv,
        calibration=cal,
    )


def store_inputs(
    num_tokens: int, num_kv_heads: int, head_dim: int, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 :class:`~tq_core.synthetic.SyntheticKV` keys and values and a shuffled slot for each
    token, for timing the store into a cache of exactly ``num_tokens`` slots."""
    k, v = SyntheticKV(num_kv_heads, head_dim, seed=seed).kv(
        num_tokens, device=device, dtype=torch.bfloat16, on_device=True
    )
    slots = torch.randperm(num_tokens, generator=torch.Generator().manual_seed(seed)).to(device)
    return k, v, slots


def store_cache(preset: str, num_tokens: int, num_kv_heads: int, head_dim: int, device: torch.device) -> torch.Tensor:
    """A zeroed cache of exactly ``num_tokens`` slots (16-token blocks) in ``preset``'s layout,
    for :func:`store_inputs`' slots."""
    slot = get_preset(preset).layout(head_dim).slot_size_aligned
    return torch.zeros(num_tokens // 16, 16, num_kv_heads, slot, dtype=torch.uint8, device=device)


def store_extra(preset: str, num_tokens: int, num_kv_heads: int, head_dim: int, device: torch.device) -> dict:
    """The store's keyword arguments for timing ``preset`` on :func:`store_inputs`: a
    calibration and positions (every token past position 0) for a calibrated format."""
    if not get_preset(preset).calibrated:
        return {}
    gen = torch.Generator().manual_seed(0)
    cal = random_calibration(gen, num_kv_heads, head_dim).to(device)
    return {"calibration": cal, "positions": torch.arange(1, num_tokens + 1, device=device)}


# what ``tq bench --kernel`` runs: the plan's choice, or the portable Triton kernel alone
KERNELS = ("default", "portable")


def case_plan(case: Case, kernel: str = "default") -> LaunchPlan:
    """The launch plan of ``tq_triton.attention`` on the case: the plan's choice (``default``)
    or the portable kernel with its table entries (``portable``, ``plan.plan_attention``)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r}: expected one of {KERNELS}")
    shape = (case.query, case.kv_cache, case.shape.batch, case.preset)
    return attention_plan(*shape, max_query_len=case.max_query_len, portable=kernel == "portable")


def run_tq(
    case: Case, out: torch.Tensor | None = None, impl: Callable[..., torch.Tensor] = attention, **kw
) -> torch.Tensor:
    """``impl`` (default ``tq_triton.attention``) on the case; a variant with the same signature
    can stand in; ``kw`` goes to it (``plan``, say)."""
    return impl(
        case.query,
        case.kv_cache,
        case.block_table,
        case.seq_lens,
        case.query_start_loc,
        case.preset,
        case.scale,
        out=out,
        max_query_len=case.max_query_len,
        **case.extra(),
        **kw,
    )


def looped_per_token(case: Case) -> Callable[[], None]:
    """Per-token baseline 1 (as the turboquant-xpu project measured verify): one q_len=1 call per
    verify token position (uniform q_len only)."""
    sh = case.shape
    q_len = sh.q_len
    b = sh.batch
    q = case.query.view(b, q_len, sh.q_heads, sh.head_dim)
    qsl = torch.arange(b + 1, dtype=torch.int32, device=case.query.device)
    lens = [case.seq_lens - (q_len - 1 - i) for i in range(q_len)]
    qs = [q[:, i].contiguous() for i in range(q_len)]
    outs = [torch.empty_like(x) for x in qs]

    def fn() -> None:
        for i in range(q_len):
            attention(
                qs[i],
                case.kv_cache,
                case.block_table,
                lens[i],
                qsl,
                case.preset,
                case.scale,
                out=outs[i],
                max_query_len=1,
                **case.extra(),
            )

    return fn


def batched_per_token(case: Case) -> Callable[[], None]:
    """Per-token baseline 2: one call, each verify token its own q_len=1 request with its own length."""
    qls = case.shape.request_q_lens()
    dev = case.query.device
    rows, lens = [], []
    seq = case.seq_lens.tolist()
    for r, ql in enumerate(qls):
        for i in range(ql):
            rows.append(r)
            lens.append(seq[r] - (ql - 1 - i))
    rows_t = torch.tensor(rows, device=dev)
    table = case.block_table[rows_t].contiguous()
    lens_t = torch.tensor(lens, dtype=torch.int32, device=dev)
    qsl = torch.arange(len(rows) + 1, dtype=torch.int32, device=dev)
    out = torch.empty_like(case.query)

    def fn() -> None:
        attention(
            case.query,
            case.kv_cache,
            table,
            lens_t,
            qsl,
            case.preset,
            case.scale,
            out=out,
            max_query_len=1,
            **case.extra(),
        )

    return fn


Candidate = tuple[str, Callable[[], object], Callable[[object], torch.Tensor]]


def bf16_candidates(case: Case) -> list[Candidate]:
    """Every bf16 attention that computes the case's outputs, as (label, call, rows): the
    call is what is timed and returns the kernel's output as it comes; ``rows`` turns that
    into ``[num_query_tokens, Hq, D]`` (the layout of ``case.query``), outside the timing.

    Uniform shapes:

    - each torch SDPA backend (cuDNN, flash, memory-efficient, math) on ``[B, Hq, q_len, D]``
      queries with GQA, causal (bottom-right) for q_len > 1: as ``causal_lower_right`` where
      the backend takes it, else as an explicit boolean mask;
    - for q_len > 1, "packed rows": each kv head's G x q_len query rows as one query block
      over its K/V, without a mask. The causal mask changes q_len - 1 of seq_len keys per
      row, so this is a lower bound on any bf16 verify kernel's time (FlashAttention and
      FlashInfer run verify this way); its label says so.

    Ragged shapes (per-request q_len and seq_len):

    - each SDPA backend called once per request (``per-request``), causal bottom-right
      where the request has more than one query token;
    - on cuda, FlashAttention's variable-length kernel over all requests in one call
      (``flash-varlen``: packed K/V, cumulative lengths, GQA, causal bottom-right).

    Needs ``case.dense_k`` / ``case.dense_v`` (``build_case(..., dense=True)``).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    sh = case.shape
    if case.dense_k is None or case.dense_v is None:
        raise ValueError("bf16_candidates needs the case's dense K/V: build_case(..., dense=True)")
    backends = (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)
    if sh.q_lens or sh.seq_lens:
        return _ragged_candidates(case, backends)
    b, ql, hq, hk, d = sh.batch, sh.q_len, sh.q_heads, sh.kv_heads, sh.head_dim
    q = case.query.view(b, ql, hq, d).transpose(1, 2)
    k, v = case.dense_k, case.dense_v
    sdpa = torch.nn.functional.scaled_dot_product_attention
    masks: list[tuple[str, object]] = [("", None)]
    if ql > 1:
        dense_mask = torch.ones(ql, sh.seq_len, dtype=torch.bool, device=q.device).tril(sh.seq_len - ql)
        masks = [("", causal_lower_right(ql, sh.seq_len)), ("+mask", dense_mask)]
    out: list[Candidate] = []

    def rows(o: torch.Tensor) -> torch.Tensor:
        return o.transpose(1, 2).reshape(b * ql, hq, d)

    for backend in backends:
        for suffix, mask in masks:

            def fn(backend=backend, mask=mask) -> torch.Tensor:
                with sdpa_kernel(backend):
                    return sdpa(q, k, v, attn_mask=mask, scale=case.scale, enable_gqa=True)

            out.append((f"sdpa-{backend.name.lower()}{suffix}", fn, rows))
    if ql > 1:
        g = hq // hk
        packed = case.query.view(b, ql, hk, g, d).permute(0, 2, 3, 1, 4).reshape(b, hk, g * ql, d).contiguous()

        def packed_rows(o: torch.Tensor) -> torch.Tensor:
            return o.view(b, hk, g, ql, d).permute(0, 3, 1, 2, 4).reshape(b * ql, hq, d)

        for backend in backends[:3]:

            def fn(backend=backend) -> torch.Tensor:
                with sdpa_kernel(backend):
                    return sdpa(packed, k, v, scale=case.scale)

            out.append((f"packed-rows-{backend.name.lower()} (lower bound)", fn, packed_rows))
    return out


def _ragged_candidates(case: Case, backends: tuple) -> list[Candidate]:
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    sh = case.shape
    qls, seqs = sh.request_q_lens(), sh.request_seq_lens()
    starts = [0, *torch.tensor(qls).cumsum(0).tolist()]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    # per request: [1, Hq, q_len, D] queries over [1, Hk, seq_len, D] keys and values
    reqs = []
    for r, (ql, sl) in enumerate(zip(qls, seqs, strict=True)):
        q = case.query[starts[r] : starts[r + 1]].transpose(0, 1).unsqueeze(0)
        k = case.dense_k[r : r + 1, :, :sl]
        v = case.dense_v[r : r + 1, :, :sl]
        reqs.append((q, k, v, causal_lower_right(ql, sl) if ql > 1 else None))
    out: list[Candidate] = []

    def rows(outs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([o[0].transpose(0, 1) for o in outs])

    for backend in backends:

        def fn(backend=backend) -> list[torch.Tensor]:
            with sdpa_kernel(backend):
                return [sdpa(q, k, v, attn_mask=m, scale=case.scale, enable_gqa=True) for q, k, v, m in reqs]

        out.append((f"sdpa-{backend.name.lower()}-per-request", fn, rows))
    if case.query.is_cuda and hasattr(torch.ops.aten, "_flash_attention_forward"):
        kp = torch.cat([case.dense_k[r, :, :sl].transpose(0, 1) for r, sl in enumerate(seqs)]).contiguous()
        vp = torch.cat([case.dense_v[r, :, :sl].transpose(0, 1) for r, sl in enumerate(seqs)]).contiguous()
        dev = case.query.device
        cu_q = torch.tensor(starts, dtype=torch.int32, device=dev)
        cu_k = torch.tensor([0, *torch.tensor(seqs).cumsum(0).tolist()], dtype=torch.int32, device=dev)
        q = case.query.contiguous()

        def varlen() -> tuple:
            return torch.ops.aten._flash_attention_forward(
                q, kp, vp, cu_q, cu_k, max(qls), max(seqs), 0.0, True, False, scale=case.scale
            )

        out.append(("flash-varlen", varlen, lambda res: res[0]))
    return out


def sdpa_bf16(case: Case) -> tuple[Callable[[], object], str]:
    """The fastest of :func:`bf16_candidates` on this device, as (call, label); candidates a
    backend refuses (shape, GQA, mask) are skipped."""
    best: tuple[float, Callable[[], object], str] | None = None
    for label, fn, _ in bf16_candidates(case):
        try:
            fn()
            torch.cuda.synchronize() if case.query.is_cuda else None
        except Exception:  # this backend refuses the shape, GQA or the mask
            continue
        t = time_ms(fn, warmup=5, rep=20)
        if best is None or t < best[0]:
            best = (t, fn, label)
    if best is None:
        raise RuntimeError("no SDPA backend accepted the bf16 baseline")
    return best[1], best[2]


def time_ms(fn: Callable[[], object], warmup: int = 25, rep: int = 100, graph: bool = True) -> float:
    """Median milliseconds of one ``fn()`` on the device.

    On cuda the calls are captured in a CUDA graph and its replays are timed, as a server
    replays decode steps, so host-side launch overhead does not hide the kernels' time
    (``graph=False`` times eager calls instead). ``warmup`` and ``rep`` are milliseconds,
    as in ``triton.testing.do_bench``.
    """
    import triton.testing

    if graph and torch.cuda.is_available() and torch.cuda.is_initialized():
        fn()  # compile outside the capture
        torch.cuda.synchronize()
        return float(triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median"))
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def copy_bandwidth_gbs(device: torch.device, nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth, bytes read plus written, in GB/s."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    # eager on purpose: timed in a CUDA graph, back-to-back 2 GB copies read about 35% low on an H200
    t = time_ms(lambda: dst.copy_(src), warmup=5, rep=50, graph=False)
    return 2 * nbytes / (t * 1e-3) / 1e9


def with_seq_len(shape: Shape, seq_len: int) -> Shape:
    return replace(shape, seq_len=seq_len, name=f"{shape.name}@{seq_len}")
