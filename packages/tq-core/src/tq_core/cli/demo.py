"""tq demo: accuracy and capacity of every preset on a synthetic, LLM-like KV cache.

Builds a batch of requests (decode, q_len = 1, and speculative verify, q_len = 1 + k)
over a paged cache with randomly permuted physical blocks, stores the keys and values
with each preset through store and runs attention on the compressed cache. It
reports, per format:

- bytes per token and kv head (key + value) and the capacity ratio vs a bf16 cache;
- key MSE: E||x - x_hat||^2 of the unit key x = k/||k|| as attention sees it (decoded
  from the cache), next to the Gaussian-codebook figure for random unit vectors;
- value error: ||v - v_hat|| / ||v|| over the whole cache;
- attention error vs attention over the same keys and values in bf16: relative L2 over
  all output rows, and the mean and minimum cosine similarity of output rows.

tq's calibrated formats (tq_k4v3, tq_k4v4) are calibrated first on other draws of the
same synthetic layer (tq_core.CalibrationStats) and run on tq_core's reference ops;
their key MSE is that of the decoded key, with no codebook figure beside it.

The keys have a few high-magnitude channels and per-head offsets
(tq_core.synthetic.SyntheticKV), the case that makes plain per-channel quantization
fail. The store and attention of the installed backend that ranks highest for the
device run (tq_core.contract.select_backend: tq-triton on cuda and xpu where it is
installed); otherwise tq_core's reference ops (the CPU is enough).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from dataclasses import asdict, dataclass

import torch

from ..__about__ import __version__
from ..calibration import CalibrationStats, LayerCalibration
from ..codebooks import distortion
from ..codec import FP8_E4M3_MAX
from ..contract import Backend, core_backend, select_backend
from ..errors import BackendUnavailableError, TQError
from ..kv import decode_kv
from ..paged import to_vllm_cache
from ..presets import CALIBRATED_PRESETS, PRESETS, get_preset
from ..synthetic import SyntheticKV
from ..testing import block_tables
from . import UsageError
from .argtypes import int_at_least, positive_int
from .options import (
    add_block_size_option,
    add_command,
    add_device_option,
    add_head_dim_option,
    add_json_option,
    add_quiet_option,
    add_seed_option,
)
from .output import utc_timestamp, write_json
from .table import table_lines


@dataclass
class DemoRow:
    format: str
    bytes_per_token: int  # per kv head, key + value
    ratio_vs_bf16: float
    key_mse: float  # E||x - x_hat||^2 of unit keys
    key_mse_theory: float | None  # Gaussian-codebook figure (docs/references.md), None for fp8 / bf16
    value_rel_err: float
    attn_rel_l2: float
    attn_cos_mean: float
    attn_cos_min: float


def pick_device(name: str) -> torch.device:
    xpu = getattr(torch, "xpu", None)
    has_xpu = xpu is not None and xpu.is_available()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("xpu") if has_xpu else torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailableError("--device cuda: torch sees no CUDA device; --device cpu runs on the CPU")
    if name == "xpu" and not has_xpu:
        raise BackendUnavailableError("--device xpu: torch sees no XPU device; --device cpu runs on the CPU")
    return torch.device(name)


def pick_implementation(device: torch.device) -> tuple[str, Backend]:
    """(name, backend): the installed backend tq_core.contract picks for ``device``.

    When a backend that would rank higher cannot load, the name says why it was passed over.
    """
    backend, skipped = select_backend(device)
    name = backend.description
    if skipped:
        name += " (passed over: " + "; ".join(skipped) + ")"
    assert backend.store is not None  # select_backend's need_store
    return name, backend


@dataclass
class Batch:
    seq_lens: list[int]
    q_lens: list[int]
    block_size: int
    block_table: torch.Tensor  # [R, max_blocks + 1] int32
    slot_mapping: torch.Tensor  # [T] int64, request-major, positions ascending
    num_blocks: int


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def make_batch(seq_len: int, batch: int, block_size: int, gen: torch.Generator) -> Batch:
    """Ragged requests: lengths spread below ``seq_len``, q_len alternating decode and verify.

    Physical blocks are shuffled (:func:`tq_core.testing.block_tables`, three spare blocks);
    block table entries past a request's blocks name real blocks, as vLLM's padding does.
    """
    seq_lens = [max(9, seq_len - (i * seq_len) // (2 * batch) - (i % 2) * 3) for i in range(batch)]
    q_pattern = (1, 4, 1, 8)
    q_lens = [min(q_pattern[i % len(q_pattern)], s) for i, s in enumerate(seq_lens)]
    num_blocks, table, slots = block_tables(gen, seq_lens, block_size, spare_blocks=3, unused="real")
    return Batch(seq_lens, q_lens, block_size, table, slots, num_blocks)


def dense_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, b: Batch, scale: float
) -> torch.Tensor:
    """Causal attention on dense per-request K/V (float32), the baseline the presets are compared with."""
    out = torch.empty(query.shape, dtype=torch.float32, device=query.device)
    group = query.shape[1] // key.shape[1]
    t0 = q0 = 0
    for s, ql in zip(b.seq_lens, b.q_lens, strict=True):
        k = key[t0 : t0 + s].float().repeat_interleave(group, 1).transpose(0, 1)
        v = value[t0 : t0 + s].float().repeat_interleave(group, 1).transpose(0, 1)
        q = query[q0 : q0 + ql].float().transpose(0, 1)
        logits = torch.matmul(q, k.transpose(1, 2)) * scale
        qpos = s - ql + torch.arange(ql, device=query.device)
        mask = torch.arange(s, device=query.device)[None, :] > qpos[:, None]
        p = torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)
        out[q0 : q0 + ql] = torch.matmul(p, v).transpose(0, 1)
        t0, q0 = t0 + s, q0 + ql
    return out


def output_errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    out, ref = out.double().flatten(0, 1), ref.double().flatten(0, 1)
    rel = float((out - ref).norm() / ref.norm())
    cos = torch.nn.functional.cosine_similarity(out, ref, dim=-1)
    return rel, float(cos.mean()), float(cos.min())


def unit_key_mse(key: torch.Tensor, key_hat: torch.Tensor) -> float:
    norm = key.norm(dim=-1, keepdim=True)
    return float(((key - key_hat.float()) / norm).pow(2).sum(-1).mean(dtype=torch.float64))


def run_demo(
    *,
    device: torch.device,
    seed: int = 0,
    head_dim: int = 128,
    kv_heads: int = 4,
    q_heads: int = 16,
    block_size: int = 16,
    seq_len: int = 2048,
    batch: int = 4,
    presets: list[str] | None = None,
    progress=None,
) -> dict:
    presets = [*PRESETS, *CALIBRATED_PRESETS] if presets is None else [get_preset(p).name for p in presets]
    impl_name, backend = pick_implementation(device)
    cal: LayerCalibration | None = None
    if any(get_preset(p).calibrated for p in presets):
        cal = demo_calibration(SyntheticKV(kv_heads, head_dim, seed), q_heads)
    syn = SyntheticKV(kv_heads, head_dim, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    b = make_batch(seq_len, batch, block_size, gen)
    key, value = syn.kv(sum(b.seq_lens))
    query = syn.query(sum(b.q_lens), q_heads)
    scale = 1.0 / math.sqrt(head_dim)
    qsl = torch.tensor([0, *itertools.accumulate(b.q_lens)], dtype=torch.int32)
    seq_lens_t = torch.tensor(b.seq_lens, dtype=torch.int32)
    positions = torch.cat([torch.arange(s, dtype=torch.int32) for s in b.seq_lens])

    def dev(t: torch.Tensor) -> torch.Tensor:
        return t.to(device)

    # baselines on the same device, in float32 math over bf16 / fp8 K and V
    k16, v16 = key.bfloat16(), value.bfloat16()
    ref = dense_attention(dev(query), dev(k16), dev(v16), b, scale)
    v16_err = float((v16.float() - value).norm() / value.norm())
    rows = [DemoRow("bf16", 4 * head_dim, 1.0, unit_key_mse(key, k16.float()), None, v16_err, 0.0, 1.0, 1.0)]
    k8 = key.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).float()
    v8 = value.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).float()
    o8 = dense_attention(dev(query), dev(k8), dev(v8), b, scale)
    rows.append(
        DemoRow(
            "fp8",
            2 * head_dim,
            2.0,
            unit_key_mse(key, k8),
            None,
            float((v8 - value).norm() / value.norm()),
            *output_errors(o8, ref),
        )
    )
    timings = {}
    for i, name in enumerate(presets):
        if progress:
            progress(f"[{i + 1}/{len(presets)}] {name}: store + attention on {device.type} ...")
        p = get_preset(name)
        slot = p.layout(head_dim).slot_size_aligned
        cache = torch.zeros(b.num_blocks, block_size, kv_heads, slot, dtype=torch.uint8, device=device)
        runs_on = backend if backend.calibrated or not p.calibrated else core_backend()
        do_store, do_attention, extra, pos_arg = runs_on.store, runs_on.attention, {}, {}
        assert do_store is not None
        if p.calibrated:
            assert cal is not None
            extra = {"calibration": cal.to(device)}
            pos_arg = {"positions": dev(positions)}
        t0 = time.perf_counter()
        do_store(dev(key), dev(value), cache, dev(b.slot_mapping), p, **extra, **pos_arg)
        out = do_attention(dev(query), cache, dev(b.block_table), dev(seq_lens_t), dev(qsl), p, scale, **extra)
        _synchronize(device)
        timings[name] = time.perf_counter() - t0
        # what the cache holds, read back through vLLM's slot format
        slots = to_vllm_cache(cache, p).flatten(0, 1)[dev(b.slot_mapping)]
        k_hat, v_hat = (t.cpu() for t in decode_kv(slots, p, head_dim, **extra, **pos_arg))
        theory = None if p.key_is_fp8 or p.calibrated else distortion(p.key_bits)
        rows.append(
            DemoRow(
                name,
                slot,
                4 * head_dim / slot,
                unit_key_mse(key, k_hat),
                theory,
                float((v_hat - value).norm() / value.norm()),
                *output_errors(out.float(), ref),
            )
        )
    return {
        "date": utc_timestamp(),
        "tq_core": __version__,
        "torch": torch.__version__,
        "device": str(device),
        "implementation": impl_name,
        "config": {
            "seed": seed,
            "head_dim": head_dim,
            "kv_heads": kv_heads,
            "q_heads": q_heads,
            "block_size": block_size,
            "seq_lens": b.seq_lens,
            "q_lens": b.q_lens,
            "num_blocks": b.num_blocks,
        },
        "seconds": timings,
        "rows": [asdict(r) for r in rows],
    }


def demo_calibration(syn: SyntheticKV, q_heads: int, rows: int = 8, tokens: int = 256) -> LayerCalibration:
    """A calibration of the synthetic layer from ``rows`` other draws of ``tokens`` tokens."""
    stats = CalibrationStats()
    for _ in range(rows):
        k, v = syn.kv(tokens)
        q = syn.query(tokens, q_heads)
        stats.add(0, q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
    return stats.finish(1).layer(0)


def _num(v: float) -> str:
    return f"{v:.4f}" if v == 0 or abs(v) >= 1e-3 else f"{v:.1e}"


COLUMNS = (
    ("format", "format", "<", str),
    ("bytes/tok/head", "bytes_per_token", ">", lambda v: f"{v}"),
    ("vs bf16", "ratio_vs_bf16", ">", lambda v: f"{v:.2f}x"),
    ("key MSE", "key_mse", ">", _num),
    ("theory", "key_mse_theory", ">", lambda v: "-" if v is None else f"{v:.4f}"),
    ("value err", "value_rel_err", ">", _num),
    ("attn rel L2", "attn_rel_l2", ">", lambda v: f"{v:.4f}"),
    ("attn cos mean", "attn_cos_mean", ">", lambda v: f"{v:.5f}"),
    ("attn cos min", "attn_cos_min", ">", lambda v: f"{v:.5f}"),
)


def render(result: dict) -> str:
    c = result["config"]
    head = [
        f"tq demo: tq-core {result['tq_core']}, torch {result['torch']}, device {result['device']}",
        f"implementation: {result['implementation']}",
        f"synthetic LLM-like cache (seed {c['seed']}): head_dim {c['head_dim']}, {c['kv_heads']} kv heads, "
        f"{c['q_heads']} q heads, block_size {c['block_size']}, {c['num_blocks']} blocks",
        f"requests: seq_lens {c['seq_lens']}, q_lens {c['q_lens']} (1 = decode, more = verify)",
        "",
    ]
    cells = [[fmt(r[key]) for _, key, _, fmt in COLUMNS] for r in result["rows"]]
    body = table_lines([t for t, *_ in COLUMNS], cells, [a for _, _, a, _ in COLUMNS])
    notes = [
        "",
        "key MSE: E||x - x_hat||^2 of unit keys as attention sees them; theory: Gaussian-codebook figure",
        "for random unit vectors (docs/references.md). value err: ||v - v_hat|| / ||v||. attn: output vs",
        "attention over the same K/V in bf16 (relative L2 over all rows; cosine per output row).",
        "fp8: K and V cast to e4m3 without scales (vLLM's fp8 cache), computed densely for comparison.",
    ]
    return "\n".join(head + body + notes)


def check_args(args: argparse.Namespace) -> None:
    """Argument combinations argparse cannot check alone; raises UsageError."""
    if args.q_heads % args.kv_heads:
        raise UsageError(f"--q-heads {args.q_heads} must be a multiple of --kv-heads {args.kv_heads}")
    for name in args.presets or [*PRESETS, *CALIBRATED_PRESETS]:
        try:
            get_preset(name).block_layout(args.head_dim, args.block_size, args.kv_heads)
        except TQError as exc:
            raise UsageError(f"--block-size {args.block_size}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    check_args(args)
    device = pick_device(args.device)

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    result = run_demo(
        device=device,
        seed=args.seed,
        head_dim=args.head_dim,
        kv_heads=args.kv_heads,
        q_heads=args.q_heads,
        block_size=args.block_size,
        seq_len=args.seq_len,
        batch=args.batch,
        presets=args.presets,
        progress=None if args.quiet else progress,
    )
    if not args.quiet:
        progress(f"done in {time.perf_counter() - t0:.1f} s")
    print(render(result))
    if args.json:
        write_json(args.json, result)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers, "demo", help="accuracy and capacity of every preset on a synthetic LLM-like cache", doc=__doc__
    )
    add_device_option(p, help="where to run (default auto: cuda, else xpu, else cpu)")
    add_seed_option(p, of="the synthetic keys, values and queries")
    add_head_dim_option(p, help="head dim (default 128)")
    p.add_argument("--kv-heads", type=positive_int, default=4, help="kv heads (default 4)")
    p.add_argument(
        "--q-heads", type=positive_int, default=16, help="query heads, a multiple of --kv-heads (default 16)"
    )
    add_block_size_option(p)
    p.add_argument(
        "--seq-len",
        type=int_at_least(9),
        default=2048,
        help="tokens of the longest request, at least 9; the others are shorter (default 2048)",
    )
    p.add_argument("--batch", type=positive_int, default=4, help="number of requests (default 4)")
    p.add_argument(
        "--presets",
        nargs="+",
        choices=sorted([*PRESETS, *CALIBRATED_PRESETS]),
        metavar="PRESET",
        help=f"presets to run, from {', '.join([*PRESETS, *CALIBRATED_PRESETS])} (default: all)",
    )
    add_json_option(p, what="the results")
    add_quiet_option(p, help="no progress lines on stderr")
    p.set_defaults(func=run)
