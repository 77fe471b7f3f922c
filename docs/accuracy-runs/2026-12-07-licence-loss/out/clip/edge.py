"""Edge cases of the candidate scale rules (rotated domain y; codes and decoded values)."""
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import torch
from kvq2 import sym_scale_candidates, sym_encode_scale, sym_rule_rot
from tq_core.hadamard import fwht
M = 10.0
cases = {
    "all-zero": torch.zeros(1, 64),
    "rotated outlier y=M*e0": torch.nn.functional.one_hot(torch.tensor([0]), 64).float() * M,
    "outlier before rotation x=M*e0 (y=+-M/8 all)": fwht(torch.nn.functional.one_hot(torch.tensor([0]), 64).float() * M),
    "rotated outlier + small noise": torch.cat([torch.tensor([[M]]), 0.1 * torch.randn(1, 63, generator=torch.Generator().manual_seed(0))], 1),
    "huge: max|y| = 70000": torch.full((1, 64), 1000.0).index_fill(1, torch.tensor([0]), 70000.0),
    "huge: max|y| = 63000": torch.full((1, 64), 1000.0).index_fill(1, torch.tensor([0]), 63000.0),
    "tiny: max|y| = 3e-8": torch.full((1, 64), 1e-8).index_fill(1, torch.tensor([0]), 3e-8),
}
for name, y in cases.items():
    print(f"== {name}: max|y| {float(y.abs().max()):.6g}, rms {float(y.square().mean().sqrt()):.6g}, ||y||^2 {float(y.square().sum()):.6g}")
    for toks in (["m1"], ["m0.9375"], ["r2.68"], ["n3.0"], [f"m{a/100}" for a in range(50, 101, 5)], ["m0.9", "m0.95"]):
        for ls in ((False, True) if toks == ["m0.9375"] else (False,)):
            s32 = sym_scale_candidates(y, toks[:1])[0]
            s, codes, _ = sym_encode_scale(y, s32)
            yhat = sym_rule_rot(y, toks, ls)
            err = float((y - yhat).square().sum())
            rel = err / float(y.square().sum()) if float(y.square().sum()) > 0 else 0.0
            label = "search11" if len(toks) == 11 else "/".join(toks) + ("/ls" if ls else "")
            cs = codes[0].int().tolist()
            print(f"  {label:12} s(first trial) {float(s):.6g}  codes[0:4] {cs[:4]} distinct {sorted(set(cs))}  yhat[0:2] {[round(v, 5) for v in yhat[0, :2].tolist()]}  rel.err {rel:.4f}")
