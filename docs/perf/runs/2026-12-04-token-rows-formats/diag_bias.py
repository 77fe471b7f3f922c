"""The score bias of test_attention_numerics.assert_scores_unbiased, printed instead of
asserted, for each kernel (token rows, Gluon, portable) and group (16 q heads per kv head: two
column tiles; 8: one), head_dim 128. Run from packages/tq-triton/tests (it imports the test
helpers). Usage: ``python3 diag_bias.py PRESET[,PRESET] [SEEDS]``."""

from __future__ import annotations

import os
import sys

import torch
from tqt_helpers import make_batch

import tq_core
import tq_triton

KERNELS = {"token_rows": {"TQ_TOKEN_ROWS": "1"}, "gluon": {"TQ_TOKEN_ROWS": "0"}, "portable": {"TQ_GLUON": "0"}}


def rel_errors(preset: str, group: int, seed: int, dev: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    reqs, hk, dim = 8, 8, 128
    b = make_batch(gen, preset, [2] * reqs, [1] * reqs, head_dim=dim, num_kv_heads=hk, group=group, device=dev)
    _, bt, sl, qsl = b.args()[1:5]
    dk, v0, dv = [], [], []
    for r in range(reqs):
        k, v = tq_core.gather_kv(b.kv_cache, bt[r], 2, b.preset)
        k, v = k.double().cpu(), v.double().cpu()
        dk.append(k[1] - k[0])
        v0.append(v[0])
        dv.append(v[1] - v[0])
    dk, v0, dv = (torch.stack(t).repeat_interleave(group, dim=1) for t in (dk, v0, dv))
    target = 1.0 + 2.0 * torch.rand(reqs, hk * group, generator=gen, dtype=torch.float64)
    c = target / (b.scale * (dk * dk).sum(-1))
    query = (c[..., None] * dk).float()
    d_true = b.scale * (query.double() * dk).sum(-1)
    out = tq_triton.attention(query.to(dev), b.kv_cache, bt, sl, qsl, b.preset, b.scale).double().cpu()
    p1 = ((out - v0) * dv).sum(-1) / (dv * dv).sum(-1)
    return (torch.log(p1 / (1 - p1)) / d_true - 1).flatten()


dev = torch.device("cuda")
presets = sys.argv[1].split(",")
seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
for preset in presets:
    for group in (16, 8):
        for name, env in KERNELS.items():
            for k in ("TQ_TOKEN_ROWS", "TQ_GLUON"):
                os.environ.pop(k, None)
            os.environ.update(env)
            rel = torch.cat([rel_errors(preset, group, s, dev) for s in range(seeds)])
            per_seed = " ".join(f"{m:+.1e}" for m in rel.view(seeds, -1).mean(1).tolist())
            print(
                f"{preset:20s} group {group:2d} {name:10s} mean {rel.mean():+.2e} (per seed {per_seed})"
                f" median|.| {rel.abs().median():.2e}",
                flush=True,
            )
