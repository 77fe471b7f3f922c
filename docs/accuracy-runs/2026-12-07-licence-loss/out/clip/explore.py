"""Offline exploration on random unit vectors (d=64) and a subset of the calibrated values:
best small trial sets, trials-vs-gain, and the best possible scale as a function of max/rms alone."""
import itertools, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import torch, numpy as np
import kvq2
from kvq2 import sym_rule_rot

t0 = time.time()
g = torch.Generator().manual_seed(2)
z = torch.randn(100000, 64, generator=g)
Y = {"unit64": z / z.norm(dim=-1, keepdim=True)}
vec = torch.load(sys.argv[1]) if len(sys.argv) > 1 else None
if vec is not None:
    c = torch.cat(list(vec["legal"].values()))
    Y["legal(sub)"] = c[torch.randperm(c.shape[0], generator=g)[:100000]]

def err(y, toks, ls=False):
    return float((y - sym_rule_rot(y, toks, ls)).square().sum())

for name, y in Y.items():
    base = err(y, ["m1"])
    print(f"== {name}")
    # per-alpha error table (fine grid), per vector
    al = [round(0.40 + 0.01 * i, 2) for i in range(61)]
    E = torch.stack([(y - sym_rule_rot(y, [f"m{a}"])).square().sum(-1) for a in al], 1)  # [N, A]
    amax = y.abs().amax(-1); rms = y.square().mean(-1).sqrt(); ratio = amax / rms
    print(f"  oracle over 61 alphas 0.40..1.00: {float(E.min(1).values.sum()) / base:.4f}")
    for step in (0.05, 0.025):
        idx = [i for i, a in enumerate(al) if abs((a - 0.5) / step - round((a - 0.5) / step)) < 1e-6 and a >= 0.5]
        print(f"  search {len(idx)} alphas 0.50..1.00 step {step}: {float(E[:, idx].min(1).values.sum()) / base:.4f}")
    # best fixed single alpha, and best f(max/rms) by 20 quantile bins
    tot = E.sum(0)
    print(f"  best single alpha {al[int(tot.argmin())]}: {float(tot.min()) / base:.4f}")
    q = torch.quantile(ratio, torch.linspace(0, 1, 21))
    b = torch.bucketize(ratio, q[1:-1])
    best_bin = 0.0; rows = []
    for k in range(20):
        m = b == k
        tk = E[m].sum(0); best_bin += float(tk.min()); rows.append((float(ratio[m].mean()), al[int(tk.argmin())]))
    print(f"  best alpha per max/rms bin (20 bins; the best any rule of max and rms can do, roughly): {best_bin / base:.4f}")
    print("   bins (mean max/rms -> alpha, s/rms):", " ".join(f"{r:.2f}->{a:.2f}({16/15*a*r:.2f})" for r, a in rows))
    # best subsets of k alphas from the 0.05 grid
    grid = [i for i, a in enumerate(al) if a >= 0.5 and round(a * 100) % 5 == 0]
    for k in (2, 3, 4):
        best = min(itertools.combinations(grid, k), key=lambda s: float(E[:, list(s)].min(1).values.sum()))
        val = float(E[:, list(best)].min(1).values.sum()) / base
        print(f"  best {k} alphas {[al[i] for i in best]}: {val:.4f}")
    for toks in (["m1"], ["m0.9", "m0.7"], ["m0.95", "m0.75"], ["m1", "m0.85", "m0.7"], ["m0.95", "m0.8", "m0.65"]):
        print(f"  {'/'.join(toks)} +ls: {err(y, toks, True) / base:.4f}")
print(f"{time.time() - t0:.0f} s")
