"""Value codes for tq_k4v4's (and tq_k4v3's) bytes that a GPU decodes without a table lookup,
against their Lloyd-Max values, on SmolLM2 with tq eval's default windows (pydoc_data.topics, 16 x 512,
every layer, decode semantics). Keys as tq_k4v4 codes them in every variant (4-bit Lloyd-Max
after the calibrated per-channel offset and gains, position 0 against its own offset); values
after tq_k4v4's offset and gains (position 0 its own offset), then one of:

- ``lm``: 4-bit Lloyd-Max codes of the rotated unit vector and an fp16 folded norm (tq_k4v4's
  values until 2026-12-04);
- ``e2m1``: the rotated vector over an fp16 scale ``max |y| / 6``, each coordinate the
  nearest of the fp4 (e2m1) grid 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6; its fp16 bits are the
  code's sign, exponent and mantissa bits in place times a power of two, so no table;
- ``u15``: the same with the symmetric uniform grid -7..7 and scale ``max |y| / 7``;
- ``u16``: the uniform grid ±0.5..±7.5 and scale ``max |y| / 7.5`` (vLLM's values without
  the zero point); ``u8`` its 3-bit twin (±0.5..±3.5);
- ``i16``: the two's-complement grid -8..7 and the smallest scale that holds both ends
  (``max(max y / 7, -min y / 8)``); ``i8`` its 3-bit twin (-4..3).

Variants added for the symmetric values of tq_k4v4 (2026-12-04-symmetric-values): ``gNNN``,
``lNNN`` (a fixed uniform grid on the unit vector), ``u16r`` and ``u16sK`` (``u16`` with a
refitted or searched step); see their functions.

Each keeps the format's bytes: the code bytes and one fp16 per token and head. Calibration
on other text (standard-library docstrings), as ``tq eval`` does by default. Usage:
``python3 probe_values.py lm,e2m1,u15,u16 [WINDOWS [PRESET]]`` (PRESET tq_k4v4 by default,
or tq_k4v3 with the 3-bit grids)."""

from __future__ import annotations

import sys
import time

import torch

from tq_core import get_preset
from tq_core.codec import decode_fields, encode_fields, lloyd_max_decode, lloyd_max_encode, rotate
from tq_core.eval import cache_attention as ca
from tq_core.eval.calibrate import calibrate_model, default_calibration_text
from tq_core.eval.metrics import WindowScores, summarize
from tq_core.eval.model import load_model, model_folder, require_transformers
from tq_core.eval.text import default_text, make_windows

GRIDS = {
    "e2m1": ([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], 6.0),
    "u15": ([float(i) for i in range(8)], 7.0),
    "u16": ([i + 0.5 for i in range(8)], 7.5),
    "u8": ([i + 0.5 for i in range(4)], 3.5),
}
# two's-complement grids: levels -2^(b-1) .. 2^(b-1) - 1 times a scale that fits both ends
INT_GRIDS = {"i16": 8, "i8": 4}


def fixed_grid(y: torch.Tensor, mode: str) -> torch.Tensor:
    """``gNNN``: the 4-bit grid ±0.5..±7.5 times a fixed step ``NNN / 1000 / sqrt(d)`` on the unit
    vector (a uniform codebook in Lloyd-Max's place), with the folded norm ``||y|| / ||c||``;
    ``lNNN``: the same codes with the least-squares scale ``<y, c> / <c, c>``."""
    d = y.shape[-1]
    step = int(mode[1:]) / 1000 / d**0.5
    half = 8
    n = y.norm(dim=-1, keepdim=True)
    u = y / torch.where(n > 0, n, torch.ones_like(n))
    q = torch.floor(u / step).clamp(-half, half - 1) + 0.5
    c = q * step
    if mode[0] == "g":
        s = n / c.norm(dim=-1, keepdim=True)
    else:
        s = (y * c).sum(-1, keepdim=True) / (c * c).sum(-1, keepdim=True)
    return c * s.half().float()


def u16_variant(y: torch.Tensor, mode: str) -> torch.Tensor:
    """``u16r``: ``u16``'s codes, then the least-squares step ``<y, q> / <q, q>``; ``u16sK``: the
    best by squared error of K steps ``max |y| / 7.5 * (1 - j / (2 K))``, then that refit."""
    half = 8

    def code(step):
        safe = torch.where(step > 0, step, torch.ones_like(step))
        return torch.floor(y / safe).clamp(-half, half - 1) + 0.5

    amax = y.abs().amax(-1, keepdim=True) / 7.5
    if mode == "u16r":
        cands = [1.0]
    else:
        k = int(mode[4:])
        cands = [1 - j / (2 * k) for j in range(k)]
    best, best_err = None, None
    for f in cands:
        st = (amax * f).half().float()
        q = code(st)
        err = (y - q * st).square().sum(-1, keepdim=True)
        if best is None:
            best, best_err = q, err
        else:
            take = err < best_err
            best = torch.where(take, q, best)
            best_err = torch.where(take, err, best_err)
    s = (y * best).sum(-1, keepdim=True) / (best * best).sum(-1, keepdim=True).clamp(min=1e-30)
    return best * s.half().float()


def grid_code(y: torch.Tensor, mode: str) -> torch.Tensor:
    """``y`` ``[..., d]`` coded on ``mode``'s grid over an fp16 scale per vector, decoded."""
    if mode.startswith("u16") and len(mode) > 3:
        return u16_variant(y, mode)
    if mode[0] in "gl" and mode[1:4].isdigit():
        return fixed_grid(y, mode)
    if mode in INT_GRIDS:
        half = INT_GRIDS[mode]
        s = torch.maximum(y.amax(-1, keepdim=True) / (half - 1), -y.amin(-1, keepdim=True) / half)
        s = s.clamp(min=0).half().float()
        safe = torch.where(s > 0, s, torch.ones_like(s))
        return torch.round(y / safe).clamp(-half, half - 1) * s
    levels, top = GRIDS[mode]
    g = torch.tensor(levels, dtype=torch.float32)
    s = (y.abs().amax(-1, keepdim=True) / top).half().float()
    safe = torch.where(s > 0, s, torch.ones_like(s))
    idx = torch.bucketize(y.abs() / safe, (g[1:] + g[:-1]) / 2)
    sign = torch.where(y < 0, -1.0, 1.0)
    return sign * g[idx] * s


class Variant:
    """``tq eval``'s attention hook: every layer's keys and values through tq_k4v4's codec,
    the values through ``mode`` instead of Lloyd-Max unless ``mode`` is ``lm``."""

    def __init__(self, mode: str, calibration, preset: str) -> None:
        self.mode, self.cal, self.preset = mode, calibration, preset
        self.verr = [0.0, 0.0]

    def __call__(self, layer, q, k, v, scaling):
        b, hk, t, d = k.shape
        kk = k.float().permute(0, 2, 1, 3).reshape(b * t, hk, d)
        vv = v.float().permute(0, 2, 1, 3).reshape(b * t, hk, d)
        first = (torch.arange(t) == 0).repeat(b)
        cal = self.cal.layer(layer)
        fields = encode_fields(kk, vv, self.preset, cal, first)
        kh, vh = decode_fields(fields, self.preset, d, calibration=cal, first=first)
        _, vc = cal.code(kk, vv, first)
        if self.mode == "lm":
            # Lloyd-Max values with a folded norm, whatever value code the preset has now
            bits = get_preset(self.preset).value_bits
            codes, norm = lloyd_max_encode(vc, bits, fold_norm=True)
            vc_hat = lloyd_max_decode(codes, norm, bits, d, norm_correction=False)
        else:
            vc_hat = rotate(grid_code(rotate(vc), self.mode))  # the orthonormal H is its own inverse
        vh = vc_hat / cal.value_gain + cal.offset("value", first)
        _, vc_back = cal.code(kk, vh, first)
        self.verr[0] += float((vc_back - vc).square().sum())
        self.verr[1] += float(vc.square().sum())
        kh = kh.reshape(b, t, hk, d).permute(0, 2, 1, 3).to(q.dtype)
        vh = vh.reshape(b, t, hk, d).permute(0, 2, 1, 3).to(q.dtype)
        return ca.raw_attention(q, kh, vh, scaling)


def run_windows(model, windows, hook, base=None):
    sc = WindowScores()
    saved = []
    for i in range(0, len(windows), 4):
        ids = torch.tensor(windows[i : i + 4])
        if hook is not None:
            ca._active.append(hook)
        try:
            logits = model(ids, use_cache=False).logits
        finally:
            if hook is not None:
                ca._active.pop()
        saved.append(sc.add(logits, ids, None if base is None else base[i // 4]))
    return sc, saved


def main() -> None:
    t0 = time.time()
    modes = sys.argv[1].split(",")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    preset = sys.argv[3] if len(sys.argv) > 3 else "tq_k4v4"
    tr = require_transformers()
    model, tok = load_model(model_folder(), torch.device("cpu"), torch.float32, ca.register(tr))
    torch.set_grad_enabled(False)
    layers = model.config.num_hidden_layers
    cal = calibrate_model(model, tok, layers, default_calibration_text(), "docstrings")
    print(f"calibrated {time.time() - t0:.0f}s", flush=True)
    win = make_windows(default_text(), tok, count, 512)
    base, base_lp = run_windows(model, win.ids, None)
    for mode in modes:
        var = Variant(mode, cal, preset)
        sc, _ = run_windows(model, win.ids, var, base_lp)
        r = summarize(sc, base, win.scored_bytes)
        se = "" if r.ppl_change_se is None else f" ±{r.ppl_change_se:.2%}"
        print(
            f"{preset} values {mode:5s} ppl {r.ppl_change:+.2%}{se} KL {r.kl:.4f}"
            f" value error {var.verr[0] / var.verr[1]:.5f}  [{time.time() - t0:.0f}s]",
            flush=True,
        )


if __name__ == "__main__":
    main()
