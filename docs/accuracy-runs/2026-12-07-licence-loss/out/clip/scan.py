"""Fine scan of the fixed factor: s = c * max|y| (c = 16/15 * alpha), with and without the
least-squares refit, on unit vectors (d=64) and on the legal / cal calibrated values."""
import sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import torch
from kvq2 import sym_rule_rot, ALPHAS
g = torch.Generator().manual_seed(3)
z = torch.randn(200000, 64, generator=g)
Y = {"unit64": z / z.norm(dim=-1, keepdim=True)}
vec = torch.load(sys.argv[1])
for k in ("cal", "legal", "pydoc"):
    Y[k] = torch.cat(list(vec[k].values()))
def e(y, toks, ls=False):
    return float((y - sym_rule_rot(y, toks, ls)).square().sum())
for name, y in Y.items():
    base = e(y, ["m1"]); srch = e(y, [f"m{a}" for a in ALPHAS])
    print(f"== {name} ({y.shape[0]} vectors)  search11/max {srch / base:.4f}")
    for a in (0.90, 0.91, 0.92, 0.925, 0.93, 0.935, 0.9375, 0.94, 0.95, 0.96):
        r, rl = e(y, [f"m{a}"]) / base, e(y, [f"m{a}"], True) / base
        print(f"  s = {16/15*a:.4f} max|y| (alpha {a}):  /max {r:.4f}  /search {r*base/srch:.4f}   +ls: /max {rl:.4f} /search {rl*base/srch:.4f}")
    for toks in (["m0.9", "m0.95"], ["m0.9", "m0.95", "m1"], ["m0.9375", "m0.9"]):
        for ls in (False, True):
            r = e(y, toks, ls) / base
            print(f"  {'/'.join(toks)}{' +ls' if ls else ''}: /max {r:.4f} /search {r*base/srch:.4f}")
