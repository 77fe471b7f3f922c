"""``tq eval``'s outputs: the text table, the per-layer table and the quality-against-bytes plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..cli.table import table_lines
from .run import EvalResult, FormatResult


def _pct(x: float, se: float | None, digits: int = 2) -> str:
    s = f"{100 * x:+.{digits}f}%"
    return s if se is None else f"{s} ±{100 * se:.{digits}f}"


def _num(x: float, se: float | None, digits: int = 4) -> str:
    s = f"{x:.{digits}f}"
    return s if se is None else f"{s} ±{se:.{digits}f}"


def _semantics(chunk: int, prompt_len: int | None) -> str:
    if chunk == 0:
        return "every token read the compressed cache of itself and all earlier tokens, as a decode step"
    span = "each window" if prompt_len is None else f"the first {prompt_len} tokens of each window"
    rest = "" if prompt_len is None else ", the rest decode steps"
    return (
        f"{span} a prompt fed {chunk} tokens per step: each token read its own step's keys and values raw "
        f"and the compressed cache before it{rest}"
    )


def _calibration_line(r: EvalResult) -> list[str]:
    """Where the calibrated formats' calibration came from (none: no line)."""
    cal = r.meta.get("calibration")
    if not isinstance(cal, dict):
        return []
    source = f"read from {r.config.calibration}" if r.config.calibration else "made by this run"
    texts = cal.get("texts")
    if isinstance(texts, list) and texts:
        made = ", ".join(f"{t.get('windows')} of {t.get('label')}" for t in texts if isinstance(t, dict))
    else:  # a file from before calibrations listed their texts
        made = f"{cal.get('windows')} of {cal.get('text')}"
    return [f"calibration ({source}): windows of {cal.get('window')} tokens: {made}"]


def render(r: EvalResult) -> str:
    """The table: one row per format (and boundary setting), the uncompressed run first."""
    b = r.baseline
    head = [
        f"tq eval: {r.model}, {r.num_layers} layers, {r.num_q_heads} q / {r.num_kv_heads} kv heads, "
        f"head_dim {r.head_dim}",
        f"text: {r.text}, {r.windows} window{'s' if r.windows != 1 else ''} of {r.window} tokens "
        f"({r.scored_tokens} predicted tokens, {r.scored_bytes} bytes, of {r.text_tokens} tokens in the text)",
        f"device: {r.device}, backend: {r.backend}; {r.seconds:.0f} s",
        *_calibration_line(r),
        _semantics(r.config.prompt_chunk, r.config.prompt_len),
        "",
    ]
    header = [
        "format", "layers", "B/tok/kvh", "+state @window/32K", "ppl", "ppl change ±se", "bits/byte", "KL nats/tok ±se",
        "top-1 agree ±se", "key err", "value err",
    ]  # fmt: skip
    rows = [
        ["uncompressed (fp32 K/V)", f"0/{r.num_layers}", f"{4 * r.head_dim}", "", f"{b.ppl:.3f}", "",
         f"{b.bits_per_byte:.4f}", "", "", "", ""]
    ]  # fmt: skip
    for f in r.formats:
        s = f.summary
        rows.append(
            [
                f.label,
                f"{len(f.compressed_layers)}/{r.num_layers}",
                f"{f.bytes_per_token:.1f}",
                _state(f),
                f"{s.ppl:.3f}",
                _pct(s.ppl_change, s.ppl_change_se),
                f"{s.bits_per_byte:.4f}",
                _num(s.kl, s.kl_se),
                _pct(s.top1, s.top1_se, 1).lstrip("+"),
                f"{100 * f.mean_key_err():.2f}%",
                f"{100 * f.mean_value_err():.2f}%",
            ]
        )
    align = ["<", ">", ">", ">", ">", ">", ">", ">", ">", ">", ">"]
    notes = [
        "",
        "B/tok/kvh: key + value bytes per token and kv head, averaged over layers (uncompressed layers count as bf16);",
        "+state: the same with a calibrated format's per-model state shared over one window / over 32K tokens.",
        "ppl change, KL(uncompressed || format), top-1 agreement: against the uncompressed run over the same windows;",
        "±se: standard error over windows. key / value err: ||x - x_hat||^2 / ||x||^2 of what attention read, the mean",
        "over compressed layers, measured on the first batch of windows (per layer: --per-layer or --json).",
    ]
    return "\n".join(head + table_lines(header, rows, align) + notes)


def _state(f: FormatResult) -> str:
    if not f.state_bytes or f.bytes_at_window is None or f.bytes_at_long_context is None:
        return ""
    return f"{f.bytes_at_window:.2f} / {f.bytes_at_long_context:.2f}"


def render_layers(r: EvalResult) -> str:
    """Per-layer key and value error of every format (percent)."""
    header = ["layer"] + [f.label for f in r.formats]
    rows = []
    for layer in range(r.num_layers):
        row = [str(layer)]
        for f in r.formats:
            k, v = f.key_rel_err.get(layer), f.value_rel_err.get(layer)
            row.append("-" if k is None or v is None else f"{100 * k:.2f} / {100 * v:.2f}")
        rows.append(row)
    title = "per-layer error, key / value: ||x - x_hat||^2 / ||x||^2 in %"
    return "\n".join([title, *table_lines(header, rows, ["<"] + [">"] * len(r.formats))])


def plot(results: list[dict[str, Any]], path: str | Path, title: str | None = None) -> None:
    """Perplexity change against bytes per token: one point per format, one series per run.

    ``results`` are runs as :meth:`EvalResult.to_json` writes them (``tq eval --json``), so
    runs of several models, machines or days can share one figure. The y axis is
    symmetric-log (linear within ±0.1%), so formats from +0.01% to +40% fit on one figure;
    error bars are one standard error."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    markers = "osD^v"
    for i, r in enumerate(results):
        pts = sorted(r["formats"], key=lambda f: f.get("bytes_at_window") or f["bytes_per_token"])
        # a calibrated format's point includes its state, shared over one window (the worst case)
        xs = [f.get("bytes_at_window") or f["bytes_per_token"] for f in pts]
        ys = [100 * f["summary"]["ppl_change"] for f in pts]
        es = [100 * (f["summary"]["ppl_change_se"] or 0.0) for f in pts]
        label = f"{r['model']} ({r['device']})"
        ax.errorbar(xs, ys, yerr=es, fmt=markers[i % len(markers)], capsize=3, label=label)
        for f, x, y in zip(pts, xs, ys, strict=True):
            name = f["format"].removeprefix("turboquant_").removeprefix("tq_") + ("*" if f.get("state_bytes") else "")
            if f["boundary_layers"]:
                name += f" b{f['boundary_layers']}"
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_yscale("symlog", linthresh=0.1)
    top = max(100 * f["summary"]["ppl_change"] for r in results for f in r["formats"])
    ax.set_ylim(-0.1, max(top, 1.0) * 2)
    ax.set_xlabel("bytes per token and kv head (key + value, averaged over layers)")
    ax.set_ylabel("perplexity change vs uncompressed (%)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.grid(True, which="both", alpha=0.3)
    r0 = results[0]
    ax.set_title(title or f"tq eval: quality against bytes ({r0['text']}, {r0['windows']} x {r0['window']} tokens)",
                 fontsize=9)  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
