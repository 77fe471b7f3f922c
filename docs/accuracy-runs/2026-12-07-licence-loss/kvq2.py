"""Attribution of tq_k4v3 / tq_k4v4's loss and candidate codes of the same size, on SmolLM2.

Standalone: imports tq_core (reference codec, eval helpers), edits nothing of the repo.

Each variant codes a layer's keys and values with a chosen per-token coder in the
calibrated domain (``cal.code`` -> rotate -> code -> decode -> rotate back -> ``cal.uncode``)
and attends over the decoded K/V with decode semantics (every key and value a query sees,
its own included, is the decoded one), as ``tq eval``'s default mode does through the paged
cache (here without the paging; the arithmetic is the reference codec's).

Variant spec: ``k=CODER,v=CODER[,p0=exact][,layers=A-B]`` (``exact``: that component not
coded; ``p0=exact``: position 0 kept exact in keys and values; ``layers``: only those
layers coded). Coders: see CODERS below.

Usage:
  kvq.py eval --text FILE|pydoc --windows N --cal CAL.pt --variants SPEC [SPEC ...] --json OUT
  kvq.py fit --cal CAL.pt --out fitted.json        (codebooks fitted to calibrated, rotated coords)
  kvq.py stats --text FILE|pydoc --windows N --cal CAL.pt   (coordinate statistics)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tq_core import codec
from tq_core.calibration import Calibration
from tq_core.codebooks import get_codebook, lloyd_max
from tq_core.eval import cache_attention as ca
from tq_core.eval.calibrate import calibration_windows, load_calibration_texts
from tq_core.eval.metrics import WindowScores, summarize
from tq_core.eval.model import load_model, model_folder, require_transformers
from tq_core.eval.text import load_text, make_windows
from tq_core.hadamard import fwht

D = 64
FP16_MAX = 65504.0
torch.set_num_threads(2)

# ---------------------------------------------------------------- tables


def table_from(centroids, d=D):
    """(centroids, boundaries) float32, in units of the unit vector (scaled by 1/sqrt(d))."""
    c = torch.tensor(sorted(centroids), dtype=torch.float64) / math.sqrt(d)
    b = (c[1:] + c[:-1]) / 2
    return c.float(), b.float()


_TABLES: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
FITTED: dict = {}
_tcq_path = Path(__file__).with_name("tcq_tables.json")
TCQ_TABLES: dict = json.loads(_tcq_path.read_text()) if _tcq_path.exists() else {}


def gauss(bits):
    key = f"g{bits}"
    if key not in _TABLES:
        _TABLES[key] = table_from(get_codebook(bits, "gaussian").centroids)
    return _TABLES[key]


def beta(bits):
    key = f"b{bits}"
    if key not in _TABLES:
        _TABLES[key] = table_from(lloyd_max(bits, "beta", d=D).centroids)
    return _TABLES[key]


def fitted(name, layer):
    """A fitted table: FITTED[name] is either one list of centroids or one per layer."""
    t = FITTED[name]
    cents = t[layer] if isinstance(t[0], list) else t
    key = f"f:{name}:{layer if isinstance(t[0], list) else 'all'}"
    if key not in _TABLES:
        _TABLES[key] = table_from(cents)
    return _TABLES[key]


# ---------------------------------------------------------------- coders
# each takes coded-domain vectors x [N, H, d] (float32) and returns their decoded value (same domain)


def fp16(t):
    return t.clamp(-FP16_MAX, FP16_MAX).to(torch.float16).float()


def lm_code(x, table, scale="fold", iters=0):
    """Lloyd-Max code of the unit rotated vector; stored fp16 number times table[code].

    scale: "fold"  stored = ||x|| / ||c||   (tq's calibrated formats, norm-preserving)
           "ls"    stored = <y, c> / ||c||^2 (least squares: the decoded vector closest to y)
    iters: > 0: alternate codes = nearest(y / s) and s = <y,c>/||c||^2 (encoder-only search).
    """
    cent, bounds = table
    y = fwht(x)
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    unit = y / safe
    codes = torch.searchsorted(bounds, unit.contiguous(), right=True)
    c = cent[codes]
    if scale == "fold":
        s = norm / torch.linalg.vector_norm(c, dim=-1, keepdim=True)
    else:
        s = (y * c).sum(-1, keepdim=True) / (c * c).sum(-1, keepdim=True)
        for _ in range(iters):
            u = y / torch.where(s.abs() > 0, s, torch.ones_like(s))
            codes = torch.searchsorted(bounds, u.contiguous(), right=True)
            c = cent[codes]
            s = (y * c).sum(-1, keepdim=True) / (c * c).sum(-1, keepdim=True)
    return fwht(fp16(s) * c)


def sym_code(x, bits, alphas=(1.0,)):
    """tq_k4v4's symmetric values: n equal cells of [-s, s], s = n/(n-1) * alpha * max|y|.
    With several alphas the encoder keeps, per token, the one of least squared error (the
    decoder is unchanged: s * centre[code])."""
    n = 1 << bits
    y = fwht(x)
    amax = y.abs().amax(-1, keepdim=True)
    best, best_err = None, None
    for a in alphas:
        s = fp16(amax * (n / (n - 1)) * a)
        live = s > 0
        cell = torch.floor(y / torch.where(live, s, torch.ones_like(s)) * (n // 2)) + n // 2
        codes = cell.clamp(0, n - 1)
        yhat = torch.where(live, s * (2 * codes + 1 - n) / n, torch.zeros_like(y))
        err = (y - yhat).square().sum(-1, keepdim=True)
        if best is None:
            best, best_err = yhat, err
        else:
            better = err < best_err
            best = torch.where(better, yhat, best)
            best_err = torch.where(better, err, best_err)
    return fwht(best)


def sym_table_code(x, table, alphas=(1.0,)):
    """Values on a non-uniform table scaled per token by max|y| (s = max|y| / max|table|)."""
    cent, bounds = table
    y = fwht(x)
    amax = y.abs().amax(-1, keepdim=True)
    top = cent.abs().max()
    best, best_err = None, None
    for a in alphas:
        s = fp16(amax / top * a)
        live = s > 0
        u = y / torch.where(live, s, torch.ones_like(s))
        codes = torch.searchsorted(bounds, u.contiguous(), right=True)
        yhat = torch.where(live, s * cent[codes], torch.zeros_like(y))
        err = (y - yhat).square().sum(-1, keepdim=True)
        if best is None:
            best, best_err = yhat, err
        else:
            better = err < best_err
            best = torch.where(better, yhat, best)
            best_err = torch.where(better, err, best_err)
    return fwht(best)


ALPHAS = tuple(a / 100 for a in range(50, 101, 5))

SYM_N = 16


def sym_scale_candidates(y, spec_tokens, n=SYM_N):
    """Per-token candidate scales (each [.., 1]) of the symmetric code, before fp16 rounding.
    Tokens: mA  -> A * n/(n-1) * max|y|         (m1 = the shipped rule)
            rB  -> B * sqrt(sum y^2 / d)         (RMS rule)
            nB  -> min(n/(n-1) * max|y|, B * rms)"""
    d = y.shape[-1]
    amax = y.abs().amax(-1, keepdim=True)
    rms = torch.sqrt(y.square().sum(-1, keepdim=True) / d)
    out = []
    for t in spec_tokens:
        kind, val = t[0], float(t[1:])
        if kind == "m":
            out.append(amax * (n / (n - 1)) * val)
        elif kind == "r":
            out.append(rms * val)
        elif kind == "n":
            out.append(torch.minimum(amax * (n / (n - 1)), rms * val))
        else:
            raise ValueError(t)
    return out


def sym_encode_scale(y, s32, n=SYM_N):
    """The shipped encoder arithmetic with a given scale: fp16(s), codes from the stored s.
    Returns (s16 as float, codes, decoded yhat)."""
    s = fp16(s32)
    live = s > 0
    cell = torch.floor(y / torch.where(live, s, torch.ones_like(s)) * (n // 2)) + n // 2
    codes = torch.where(live, cell.clamp(0, n - 1), torch.zeros_like(cell))
    yhat = torch.where(live, s * (2 * codes + 1 - n) / n, torch.zeros_like(y))
    return s, codes, yhat


def sym_rule_rot(y, tokens, ls=False, n=SYM_N):
    """Rotated-domain coder: least-error of the candidate scales (one candidate: a closed-form
    rule); ls: then the stored number is refit by least squares to the chosen codes
    (s = <y, c> / <c, c>, c = (2 code + 1 - n) / n; codes unchanged, decoder unchanged)."""
    best, best_err, best_codes, best_s = None, None, None, None
    for s32 in sym_scale_candidates(y, tokens, n):
        s, codes, yhat = sym_encode_scale(y, s32, n)
        err = (y - yhat).square().sum(-1, keepdim=True)
        if best is None:
            best, best_err, best_codes, best_s = yhat, err, codes, s
        else:
            better = err < best_err
            best = torch.where(better, yhat, best)
            best_err = torch.where(better, err, best_err)
            best_codes = torch.where(better, best_codes.new_tensor(0) + codes, best_codes)
            best_s = torch.where(better, s, best_s)
    if ls:
        c = (2 * best_codes + 1 - n) / n
        s_ls = fp16((y * c).sum(-1, keepdim=True) / (c * c).sum(-1, keepdim=True))
        live = best_s > 0
        best = torch.where(live, s_ls * c, torch.zeros_like(y))
    return best


def parse_symx(name):
    """symx:TOK/TOK[/ls]  e.g. symx:r2.68  symx:n2.8  symx:m1/m0.75  symx:r2.68/ls"""
    toks = name.split(":", 1)[1].split("/")
    ls = "ls" in toks
    return [t for t in toks if t != "ls"], ls


def coder(name, layer):
    """name -> function(x) of coded-domain vectors."""
    if name.startswith("symx:"):
        toks, ls = parse_symx(name)
        return lambda x: fwht(sym_rule_rot(fwht(x), toks, ls))

    if name == "lm4g":  # tq's keys (and the Lloyd-Max values at 4 bits)
        return lambda x: lm_code(x, gauss(4))
    if name == "lm3g":  # tq_k4v3's values
        return lambda x: lm_code(x, gauss(3))
    if name == "sym4":  # tq_k4v4's values
        return lambda x: sym_code(x, 4)
    if name == "lm4b":
        return lambda x: lm_code(x, beta(4))
    if name == "lm3b":
        return lambda x: lm_code(x, beta(3))
    if name == "lm4ls":
        return lambda x: lm_code(x, gauss(4), "ls")
    if name == "lm3ls":
        return lambda x: lm_code(x, gauss(3), "ls")
    if name == "lm4opt":
        return lambda x: lm_code(x, gauss(4), "ls", iters=4)
    if name == "lm3opt":
        return lambda x: lm_code(x, gauss(3), "ls", iters=4)
    if name == "sym4opt":
        return lambda x: sym_code(x, 4, ALPHAS)
    if name == "sym3":
        return lambda x: sym_code(x, 3)
    if name == "sym3opt":
        return lambda x: sym_code(x, 3, ALPHAS)
    if name.startswith("err"):  # errF:CODER: the coder's error scaled by F (a code with F^2 times its squared error)
        f_str, _, inner = name[3:].partition(":")
        f, c = float(f_str), coder(inner, layer)
        return lambda x: x + f * (c(x) - x)
    if name in TCQ_TABLES or name[:-1] in TCQ_TABLES:
        # trellis-coded quantization, same bits (tcq.py): tcq3, tcq4, tcq3s32, tcq4s32; least-squares
        # scale, or with a trailing "f" the norm-preserving ||y|| / ||c|| (tq's fold)
        import tcq

        fold = name not in TCQ_TABLES
        t = TCQ_TABLES[name[:-1] if fold else name]
        fine = torch.tensor(t["fine"], dtype=torch.float32)

        def run(x):
            tcq.set_states(t["states"])
            return fwht(tcq.tcq_code(fwht(x), fine, t["mask"], "fold" if fold else "ls"))

        return run
    if name.startswith("fit:"):  # fit:NAME[:ls|:opt]
        parts = name.split(":")
        tab = fitted(parts[1], layer)
        mode = parts[2] if len(parts) > 2 else "fold"
        if mode == "fold":
            return lambda x: lm_code(x, tab)
        if mode == "ls":
            return lambda x: lm_code(x, tab, "ls")
        return lambda x: lm_code(x, tab, "ls", iters=4)
    if name.startswith("ref:"):  # the repository's own codec functions, to check the reimplementation
        kind = name[4:]
        if kind == "lm4":
            return lambda x: codec.lloyd_max_decode(*codec.lloyd_max_encode(x, 4, True), 4, D, False)
        if kind == "lm3":
            return lambda x: codec.lloyd_max_decode(*codec.lloyd_max_encode(x, 3, True), 3, D, False)
        if kind == "sym4":
            cent, _ = codec._symmetric_cpu(4)
            return lambda x: codec._table_decode(*codec.symmetric_encode(x, 4), cent, 4, D, False)
    raise ValueError(f"unknown coder {name!r}")


def parse_spec(spec):
    out = {"k": "exact", "v": "exact", "p0": "coded", "layers": None, "name": spec}
    for part in spec.split(","):
        key, _, val = part.partition("=")
        if key == "layers":
            a, _, b = val.partition("-")
            out["layers"] = set(range(int(a), int(b or a) + 1))
        elif key in out:
            out[key] = val
        else:
            raise ValueError(f"bad spec part {part!r}")
    return out


class VariantAttention:
    """The attention function of one variant (pushed on tq_core.eval.cache_attention._active)."""

    def __init__(self, spec, cal: Calibration):
        self.spec = parse_spec(spec)
        self.cal = cal
        self.err = {}  # layer -> [k_err, k_norm, v_err, v_norm] in model space (first batch)
        self.record = False

    def __call__(self, layer, query, key, value, scaling):
        sp = self.spec
        if sp["layers"] is not None and layer not in sp["layers"]:
            return ca.raw_attention(query, key, value, scaling)
        b, hk, t, d = key.shape
        k = key.transpose(1, 2).reshape(b * t, hk, d).float()
        v = value.transpose(1, 2).reshape(b * t, hk, d).float()
        first = (torch.arange(t) == 0).repeat(b)
        lay = self.cal.layer(layer)
        kc, vc = lay.code(k, v, first)
        kd = coder(sp["k"], layer)(kc) if sp["k"] != "exact" else kc
        vd = coder(sp["v"], layer)(vc) if sp["v"] != "exact" else vc
        kh, vh = lay.uncode(kd, vd, first)
        if sp["k"] == "exact":
            kh = k
        if sp["v"] == "exact":
            vh = v
        if sp["p0"] == "exact":
            kh = torch.where(first[:, None, None], k, kh)
            vh = torch.where(first[:, None, None], v, vh)
        if self.record:
            e = self.err.setdefault(layer, [0.0, 0.0, 0.0, 0.0])
            e[0] += float((k - kh).square().sum())
            e[1] += float(k.square().sum())
            e[2] += float((v - vh).square().sum())
            e[3] += float(v.square().sum())
        kh = kh.view(b, t, hk, d).transpose(1, 2)
        vh = vh.view(b, t, hk, d).transpose(1, 2)
        return ca.raw_attention(query, kh, vh, scaling)


# ---------------------------------------------------------------- model


def load(device="cpu"):
    transformers = require_transformers()
    attn = ca.register(transformers)
    folder = model_folder(None)
    model, tok = load_model(folder, torch.device(device), torch.float32, attn)
    return model, tok


def text_windows(tok, text, windows, window=512):
    txt, label = load_text(None if text == "pydoc" else text)
    return make_windows(txt, tok, windows, window), label


def cmd_eval(args):
    t0 = time.time()
    model, tok = load()
    cal = Calibration.load(args.cal)
    if args.fitted:
        FITTED.update(json.loads(Path(args.fitted).read_text()))
    win, label = text_windows(tok, args.text, args.windows)
    plans = [VariantAttention(s, cal) for s in args.variants]
    scores = [WindowScores() for _ in plans]
    secs = [0.0 for _ in plans]
    base = WindowScores()
    batches = [win.ids[i : i + args.batch] for i in range(0, win.count, args.batch)]
    with torch.inference_mode():
        for bi, batch in enumerate(batches):
            ids = torch.tensor(batch, dtype=torch.long)
            base_logp = base.add(model(ids, use_cache=False).logits, ids, None)
            for j, plan in enumerate(plans):
                t1 = time.time()
                plan.record = bi == 0
                ca._active.append(plan)
                try:
                    scores[j].add(model(ids, use_cache=False).logits, ids, base_logp)
                finally:
                    ca._active.remove(plan)
                secs[j] += time.time() - t1
            del base_logp
            print(f"batch {bi + 1}/{len(batches)} done, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    out = {"text": label, "windows": win.count, "cal": args.cal, "results": []}
    for plan, sc, s in zip(plans, scores, secs):
        sm = summarize(sc, base, win.scored_bytes)
        errs = plan.err
        kre = [e[0] / e[1] for e in errs.values() if e[1]]
        vre = [e[2] / e[3] for e in errs.values() if e[3]]
        r = {
            "variant": plan.spec["name"],
            "ppl_change": sm.ppl_change,
            "ppl_change_se": sm.ppl_change_se,
            "kl": sm.kl,
            "kl_se": sm.kl_se,
            "top1": sm.top1,
            "key_rel_err": sum(kre) / len(kre) if kre else 0.0,
            "value_rel_err": sum(vre) / len(vre) if vre else 0.0,
            "window_nll": sm.window_nll,
            "window_kl": [k / t for k, t in zip(sc.kl, sc.tokens)],
            "seconds": round(s, 1),
        }
        out["results"].append(r)
        print(
            f"{label[-20:]:>20} {plan.spec['name']:42} ppl {100 * sm.ppl_change:+6.2f}% ±{100 * (sm.ppl_change_se or 0):.2f}"
            f"  KL {sm.kl:.4f} ±{sm.kl_se or 0:.4f}  top1 {sm.top1:.4f}  kerr {r['key_rel_err']:.4f} verr {r['value_rel_err']:.4f}"
            f"  {s:.0f}s",
            flush=True,
        )
    out["baseline_window_nll"] = summarize(base, base, win.scored_bytes).window_nll
    out["seconds"] = round(time.time() - t0, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


# ---------------------------------------------------------------- coordinate samples


class Collector:
    """Records calibrated, rotated coordinates of keys and values (positions > 0)."""

    def __init__(self, cal, per_layer=20000, seed=0):
        self.cal = cal
        self.per_layer = per_layer
        self.g = torch.Generator().manual_seed(seed)
        self.k = {}  # layer -> list of unit*sqrt(d) coords (keys)
        self.v = {}  # values, unit-norm * sqrt(d)
        self.vmax = {}  # values: y / max|y| (the symmetric code's domain)
        self.kstat = {}  # per layer: stats of ||kc||, max|y|/||y||
        self.vstat = {}

    def __call__(self, layer, query, key, value, scaling):
        b, hk, t, d = key.shape
        k = key.transpose(1, 2).reshape(b * t, hk, d).float()
        v = value.transpose(1, 2).reshape(b * t, hk, d).float()
        first = (torch.arange(t) == 0).repeat(b)
        kc, vc = self.cal.layer(layer).code(k, v, first)
        keep = ~first
        for store, stat, x in ((self.k, self.kstat, kc[keep]), (self.v, self.vstat, vc[keep])):
            y = fwht(x)
            n = torch.linalg.vector_norm(y, dim=-1, keepdim=True)
            u = (y / n * math.sqrt(d)).reshape(-1)
            idx = torch.randint(0, u.numel(), (self.per_layer,), generator=self.g)
            store.setdefault(layer, []).append(u[idx])
            st = stat.setdefault(layer, [])
            st.append(torch.stack([n.reshape(-1), (y.abs().amax(-1) / n.squeeze(-1) * math.sqrt(d)).reshape(-1)], -1))
            if store is self.v:
                self.vmax.setdefault(layer, []).append((y / y.abs().amax(-1, keepdim=True)).reshape(-1)[idx])
        return ca.raw_attention(query, key, value, scaling)


def lloyd_1d(samples: np.ndarray, n: int, iters=200, symmetric=True) -> list[float]:
    """Lloyd-Max (1-D k-means) on samples, started from quantiles, optionally symmetrised."""
    s = np.sort(samples)
    if symmetric:
        s = np.sort(np.concatenate([s, -s]))
    q = np.quantile(s, (np.arange(n) + 0.5) / n)
    for _ in range(iters):
        edges = (q[1:] + q[:-1]) / 2
        idx = np.searchsorted(edges, s)
        sums = np.bincount(idx, weights=s, minlength=n)
        cnt = np.bincount(idx, minlength=n)
        new = np.where(cnt > 0, sums / np.maximum(cnt, 1), q)
        if symmetric:
            new = (new - new[::-1]) / 2
        if np.max(np.abs(new - q)) < 1e-9:
            q = new
            break
        q = new
    return [float(x) for x in q]


def run_collect(model, tok, cal, ids_list, batch=4):
    col = Collector(cal)
    ca._active.append(col)
    try:
        with torch.inference_mode():
            for i in range(0, len(ids_list), batch):
                model(torch.tensor(ids_list[i : i + batch], dtype=torch.long), use_cache=False)
    finally:
        ca._active.remove(col)
    return col


def cmd_fit(args):
    t0 = time.time()
    model, tok = load()
    cal = Calibration.load(args.cal)
    texts = load_calibration_texts(None)  # tq calibrate's default: mixed docstrings + source
    cw = calibration_windows(texts, tok, args.windows, 512, 0)
    col = run_collect(model, tok, cal, cw.ids)
    out = {}
    for kind, store in (("k", col.k), ("v", col.v)):
        allc = np.concatenate([torch.cat(store[l]).numpy() for l in sorted(store)])
        for bits in (3, 4):
            out[f"{kind}{bits}"] = lloyd_1d(allc, 1 << bits)
            out[f"{kind}{bits}L"] = [lloyd_1d(torch.cat(store[l]).numpy(), 1 << bits) for l in sorted(store)]
        out[f"{kind}_kurtosis"] = float(np.mean(allc**4) / np.mean(allc**2) ** 2)
    # symmetric-domain table for values (y / max|y|), 4 bits
    allv = np.concatenate([torch.cat(col.vmax[l]).numpy() for l in sorted(col.vmax)])
    out["vmax4"] = lloyd_1d(allv, 16)
    out["meta"] = {"windows": len(cw.ids), "seconds": round(time.time() - t0, 1)}
    Path(args.out).write_text(json.dumps(out, indent=1))
    for k in ("k4", "k3", "v4", "v3"):
        g = get_codebook(int(k[1]), "gaussian").centroids
        b = lloyd_max(int(k[1]), "beta", d=D).centroids
        print(k, "fitted", np.round(out[k][len(out[k]) // 2 :], 3))
        print(k, "gauss ", np.round(g[len(g) // 2 :], 3))
        print(k, "beta64", np.round(b[len(b) // 2 :], 3))
    print("kurtosis k", out["k_kurtosis"], "v", out["v_kurtosis"], "(gaussian 3, beta64 %.3f)" % (3 * 64 / 66))


def cmd_stats(args):
    """Per text: kurtosis of the calibrated rotated unit coordinates, max|y|/||y|| (x sqrt d),
    and the expected relative error of each coder on them."""
    model, tok = load()
    cal = Calibration.load(args.cal)
    if args.fitted:
        FITTED.update(json.loads(Path(args.fitted).read_text()))
    win, label = text_windows(tok, args.text, args.windows)
    col = run_collect(model, tok, cal, win.ids)
    res = {"text": label}
    for kind, store, stat in (("k", col.k, col.kstat), ("v", col.v, col.vstat)):
        allc = np.concatenate([torch.cat(store[l]).numpy() for l in sorted(store)])
        st = torch.cat([torch.cat(stat[l]) for l in sorted(stat)])
        res[kind] = {
            "kurtosis": float(np.mean(allc**4) / np.mean(allc**2) ** 2),
            "frac_abs_gt_2.5": float(np.mean(np.abs(allc) > 2.5)),
            "max_over_rms_mean": float(st[:, 1].mean()),
            "max_over_rms_p99": float(st[:, 1].quantile(0.99)),
        }
    print(json.dumps(res, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


class AttnStats:
    """Per layer: mean over queries (positions >= 64) and q heads of sum_j p_j^2 (the factor by
    which independent value errors reach the output, 1/effective number of keys), of the
    largest weight, and of the weight on position 0."""

    def __init__(self):
        self.s = {}

    def __call__(self, layer, query, key, value, scaling):
        b, hq, t, d = query.shape
        g = hq // key.shape[1]
        k = key.float().repeat_interleave(g, dim=1)
        sc = (query.float() @ k.transpose(-1, -2)) * scaling
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        p = torch.softmax(sc.masked_fill(~mask, float("-inf")), -1)[:, :, 64:]
        acc = self.s.setdefault(layer, torch.zeros(3, dtype=torch.float64))
        acc[0] += float(p.square().sum(-1).mean())
        acc[1] += float(p.amax(-1).mean())
        acc[2] += float(p[..., 0].mean())
        return ca.raw_attention(query, key, value, scaling)


def cmd_attn(args):
    model, tok = load()
    res = {}
    for text in args.texts:
        win, label = text_windows(tok, text, args.windows)
        st = AttnStats()
        ca._active.append(st)
        nb = 0
        try:
            with torch.inference_mode():
                for i in range(0, win.count, 4):
                    model(torch.tensor(win.ids[i : i + 4], dtype=torch.long), use_cache=False)
                    nb += 1
        finally:
            ca._active.remove(st)
        per = {l: (v / nb).tolist() for l, v in sorted(st.s.items())}
        res[label] = per
        m = np.array(list(per.values()))
        print(f"{label[-24:]:>24}: mean over layers sum p^2 {m[:, 0].mean():.4f}  max p {m[:, 1].mean():.4f}  p(pos0) {m[:, 2].mean():.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


# ---------------------------------------------------------------- offline clipping study


class VecCollector:
    """Records the calibrated, rotated value vectors y = H vc (all positions but 0), per layer."""

    def __init__(self, cal):
        self.cal = cal
        self.y = {}

    def __call__(self, layer, query, key, value, scaling):
        b, hk, t, d = key.shape
        k = key.transpose(1, 2).reshape(b * t, hk, d).float()
        v = value.transpose(1, 2).reshape(b * t, hk, d).float()
        first = (torch.arange(t) == 0).repeat(b)
        _, vc = self.cal.layer(layer).code(k, v, first)
        self.y.setdefault(layer, []).append(fwht(vc[~first]).reshape(-1, d).clone())
        return ca.raw_attention(query, key, value, scaling)


def collect_vectors(model, cal, ids_list, batch=4):
    col = VecCollector(cal)
    ca._active.append(col)
    try:
        with torch.inference_mode():
            for i in range(0, len(ids_list), batch):
                model(torch.tensor(ids_list[i : i + batch], dtype=torch.long), use_cache=False)
    finally:
        ca._active.remove(col)
    return {l: torch.cat(v) for l, v in col.y.items()}


def rule_err(y, rule):
    """Squared error per vector of a rule name (symx syntax without the prefix; 'search11')."""
    if rule == "search11":
        toks, ls = [f"m{a}" for a in ALPHAS], False
    elif rule == "search11/ls":
        toks, ls = [f"m{a}" for a in ALPHAS], True
    else:
        toks, ls = parse_symx("symx:" + rule)
    return (y - sym_rule_rot(y, toks, ls)).square().sum(-1)


def cmd_clip(args):
    t0 = time.time()
    torch.manual_seed(0)
    sets = {}
    g = torch.Generator().manual_seed(1)
    z = torch.randn(200000, D, generator=g)
    sets["unit64"] = {0: z / torch.linalg.vector_norm(z, dim=-1, keepdim=True)}
    if not args.random_only and args.vecs and Path(args.vecs).exists():
        sets.update(torch.load(args.vecs))
    elif not args.random_only:
        model, tok = load()
        cal = Calibration.load(args.cal)
        texts = load_calibration_texts(None)
        cw = calibration_windows(texts, tok, args.windows, 512, 0)
        sets["cal"] = collect_vectors(model, cal, cw.ids)
        for text, nw in (("legal", 11), ("pydoc", 16)):
            src = args.legal if text == "legal" else "pydoc"
            win, _ = text_windows(tok, src, nw)
            sets[text] = collect_vectors(model, cal, win.ids)
        print(f"collected in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.vecs:
            torch.save({k: v for k, v in sets.items() if k != "unit64"}, args.vecs)
    rules = ["m1", "search11"] + args.rules
    res = {}
    for sname, per in sets.items():
        tot = {r: 0.0 for r in rules}
        lay = {r: [] for r in rules}
        energy = 0.0
        stats = []
        for l, y in sorted(per.items()):
            e = float(y.square().sum())
            energy += e
            rms = torch.sqrt(y.square().mean(-1))
            stats.append((y.abs().amax(-1) / rms.clamp_min(1e-30)))
            for r in rules:
                er = float(rule_err(y, r).sum())
                tot[r] += er
                lay[r].append(er / e)
        pr = torch.cat(stats)
        out = {}
        for r in rules:
            lr = np.array(lay[r])
            out[r] = {
                "rel_mse": tot[r] / energy,
                "ratio_max": tot[r] / tot["m1"],
                "ratio_search": tot[r] / tot["search11"],
                "layer_mean_ratio_max": float(np.mean(lr / np.array(lay["m1"]))),
            }
        res[sname] = {
            "vectors": int(sum(y.shape[0] for y in per.values())),
            "max_over_rms": {"mean": float(pr.mean()), "p50": float(pr.quantile(0.5)) if pr.numel() < 2**24 else None,
                              "p99": float(pr[:2**24 - 1].quantile(0.99))},
            "rules": out,
        }
        print(f"== {sname}: {res[sname]['vectors']} vectors, max/rms mean {pr.mean():.3f}")
        for r in rules:
            o = out[r]
            print(f"  {r:28} relMSE {o['rel_mse']:.5f}  /max {o['ratio_max']:.4f}  /search {o['ratio_search']:.4f}  layer-mean/max {o['layer_mean_ratio_max']:.4f}")
    res["seconds"] = round(time.time() - t0, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval")
    e.add_argument("--text", default="pydoc")
    e.add_argument("--windows", type=int, default=16)
    e.add_argument("--batch", type=int, default=4)
    e.add_argument("--cal", required=True)
    e.add_argument("--fitted")
    e.add_argument("--variants", nargs="+", required=True)
    e.add_argument("--json")
    f = sub.add_parser("fit")
    f.add_argument("--cal", required=True)
    f.add_argument("--windows", type=int, default=8)
    f.add_argument("--out", required=True)
    s = sub.add_parser("stats")
    s.add_argument("--text", default="pydoc")
    s.add_argument("--windows", type=int, default=8)
    s.add_argument("--cal", required=True)
    s.add_argument("--fitted")
    s.add_argument("--json")
    a = sub.add_parser("attn")
    a.add_argument("--texts", nargs="+", default=["pydoc"])
    a.add_argument("--windows", type=int, default=8)
    a.add_argument("--json")
    c = sub.add_parser("clip")
    c.add_argument("--cal", required=True)
    c.add_argument("--windows", type=int, default=8)
    c.add_argument("--legal", default="/work/main/.dev/texts/legal.txt")
    c.add_argument("--rules", nargs="*", default=[])
    c.add_argument("--random-only", action="store_true")
    c.add_argument("--vecs", help="cache of the collected vectors (.pt)")
    c.add_argument("--json")
    args = p.parse_args()
    {"eval": cmd_eval, "fit": cmd_fit, "stats": cmd_stats, "attn": cmd_attn, "clip": cmd_clip}[args.cmd](args)


if __name__ == "__main__":
    main()
