"""tq_triton.attention with the installed tuning table against tq-core's reference on an
H200, at head_dim 128 and q_len 2, 3 and 4 (the q2 and q4 buckets' entries), 4 and 8 q heads
per kv head, uniform and mixed q_lens, every preset. Prints the configuration each case
runs and the largest error over the output's scale; exits 1 if any case misses."""

from __future__ import annotations

import os
import sys

import torch

import tq_core
import tq_triton
from tq_core.testing import paged_batch
from tq_core.testing.compare import attention_error
from tq_triton import tuning
from tq_triton.attention import plan

PRESETS = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")


def main() -> int:
    dev = torch.device(os.environ.get("CROSSCHECK_DEVICE", "cuda"))
    gen = torch.Generator().manual_seed(0)
    seq_lens = [3001, 517, 1200, 2048]
    failed = 0
    for preset in PRESETS:
        for q in (2, 3, 4):
            for group in (4, 8):
                for q_lens in ([q] * 4, [q, 1, q - 1, 2]):
                    b = paged_batch(
                        gen,
                        preset,
                        seq_lens,
                        q_lens,
                        head_dim=128,
                        num_kv_heads=2,
                        group=group,
                        dtype=torch.bfloat16,
                        device=dev,
                        store=tq_core.store,
                    )
                    rows = plan.plan_block_q(group, q) * group
                    cfg = tuning.attention_config(dev, preset, q, rows, 128)
                    out = tq_triton.attention(*b.args(), max_query_len=q)
                    ref = tq_core.attention(b.query.float(), *b.args()[1:])
                    err = attention_error(out.float(), ref.float())
                    verdict = "ok" if err <= 1e-2 else "MISS"
                    failed += verdict != "ok"
                    print(
                        f"{preset:20} q_lens={q_lens} group={group} gluon={cfg.gluon} block_kv={cfg.block_kv} "
                        f"splits={cfg.kv_splits} error={err:.2e} {verdict}"
                    )
    print(f"{failed} cases missed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
