"""tq capacity: KV-cache tokens that fit a memory budget, per cache format.

Bytes per token of one layer: bf16 2 * 2 * head_dim * kv_heads, fp8 half of that,
TurboQuant slot_size_aligned * kv_heads (one slot holds the key and the value).
tq's calibrated formats (tq_*) also keep a per-model state (six fp16 vectors of head_dim
per compressed layer and kv head), taken from the budget before the tokens.
vLLM keeps the first and last --boundary-layers layers of dense models in the
model dtype (bf16) when a turboquant_* cache is chosen (default 2 on each side,
capped at half the layers per side), so those layers cost bf16 bytes in the TurboQuant
rows. fp8 and bf16 caches have no boundary layers. Block rounding is ignored.
Runs on the CPU; needs no GPU.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from ..calibration import state_bytes_per_layer
from ..presets import CALIBRATED_PRESETS, PRESETS, SUPPORTED_HEAD_DIMS, get_preset
from .argtypes import nonnegative_int, positive_float, positive_int
from .options import add_command, add_head_dim_option, add_json_option
from .table import table_lines

GIB = 1 << 30


@dataclass(frozen=True)
class ModelShape:
    layers: int
    kv_heads: int
    head_dim: int


# Attention shapes from the models' Hugging Face config.json files.
MODELS: dict[str, ModelShape] = {
    "llama-3.2-1b": ModelShape(16, 8, 64),
    "llama-3.1-8b": ModelShape(32, 8, 128),
    "llama-3.1-70b": ModelShape(80, 8, 128),
    "qwen3-8b": ModelShape(36, 8, 128),
    "qwen3-32b": ModelShape(64, 8, 128),
    "qwen3-30b-a3b": ModelShape(48, 4, 128),
}


def boundary_layer_set(layers: int, boundary: int) -> set[int]:
    """Layer indices vLLM keeps in bf16: the first and last `boundary`, each side capped at layers // 2."""
    n = min(boundary, layers // 2)
    return set(range(n)) | set(range(layers - n, layers))


@dataclass(frozen=True)
class Row:
    name: str
    bytes_per_token: int
    tokens: int
    ratio_vs_bf16: float
    ratio_vs_fp8: float
    state_bytes: int = 0  # calibrated formats: the per-model state, outside the per-token bytes


def capacity_rows(shape: ModelShape, memory_bytes: int, boundary_layers: int = 2) -> list[Row]:
    """One row per format: bytes per token over all layers, tokens in ``memory_bytes``, ratios.

    The ratios are ratios of bytes per token (bf16 / format, fp8 / format), so they do not
    carry the rounding of the token counts.
    """
    layers, h, d = shape.layers, shape.kv_heads, shape.head_dim
    bf16_layer = 2 * 2 * d * h
    fp8_layer = 2 * d * h
    n_boundary = len(boundary_layer_set(layers, boundary_layers))
    formats = [("bf16", bf16_layer * layers, 0), ("fp8", fp8_layer * layers, 0)]
    for name in (*PRESETS, *CALIBRATED_PRESETS):
        slot = get_preset(name).layout(d).slot_size_aligned
        state = state_bytes_per_layer(h, d) * (layers - n_boundary) if name in CALIBRATED_PRESETS else 0
        formats.append((name, slot * h * (layers - n_boundary) + bf16_layer * n_boundary, state))
    bf16, fp8 = formats[0][1], formats[1][1]
    return [Row(name, b, max(memory_bytes - s, 0) // b, bf16 / b, fp8 / b, s) for name, b, s in formats]


def render(shape: ModelShape, memory_gib: float, boundary_layers: int, rows: list[Row], label: str) -> str:
    n_boundary = len(boundary_layer_set(shape.layers, boundary_layers))
    head = (
        f"model: {label}: {shape.layers} layers, {shape.kv_heads} kv heads, head_dim {shape.head_dim}\n"
        f"KV memory: {memory_gib:g} GiB; boundary layers kept in bf16 for turboquant_*: {n_boundary}"
        f" of {shape.layers} (--boundary-layers {boundary_layers})\n"
    )
    cols = ("format", "bytes/token", "KV tokens", "vs bf16", "vs fp8", "state bytes")
    table = [
        (r.name, f"{r.bytes_per_token:,}", f"{r.tokens:,}", f"{r.ratio_vs_bf16:.2f}x", f"{r.ratio_vs_fp8:.2f}x",
         f"{r.state_bytes:,}" if r.state_bytes else "")
        for r in rows
    ]  # fmt: skip
    lines = table_lines(cols, table, ["<"] + [">"] * (len(cols) - 1))
    return head + "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.model:
        shape = MODELS[args.model]
        shape = ModelShape(
            args.layers or shape.layers, args.kv_heads or shape.kv_heads, args.head_dim or shape.head_dim
        )
        label = args.model
    else:
        shape = ModelShape(args.layers or 32, args.kv_heads or 8, args.head_dim or 128)
        label = "custom"
    memory = int(args.memory_gib * GIB)
    rows = capacity_rows(shape, memory, args.boundary_layers)
    print(render(shape, args.memory_gib, args.boundary_layers, rows, label))
    if args.json:
        doc = {
            "model": label,
            "shape": shape.__dict__,
            "memory_bytes": memory,
            "boundary_layers": args.boundary_layers,
            "rows": [r.__dict__ for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers, "capacity", help="KV tokens per cache format for a model shape and memory budget", doc=__doc__
    )
    p.add_argument("--model", choices=sorted(MODELS), help="a known model shape (--layers etc. override it)")
    p.add_argument("--layers", type=positive_int, help="attention layers (default 32)")
    p.add_argument("--kv-heads", type=positive_int, help="kv heads per layer (default 8)")
    add_head_dim_option(
        p, default=None, help=f"head dim, one of {', '.join(map(str, SUPPORTED_HEAD_DIMS))} (default 128)"
    )
    p.add_argument(
        "--memory-gib", type=positive_float, default=16.0, help="memory for the KV cache in GiB (default 16)"
    )
    p.add_argument(
        "--boundary-layers",
        type=nonnegative_int,
        default=2,
        help="first and last N layers vLLM keeps in bf16 with a turboquant_* cache (default 2; 0 = none)",
    )
    add_json_option(p, what="the table")
    p.set_defaults(func=run)
