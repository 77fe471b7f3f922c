#!/usr/bin/env bash
# Call 4, from the repository root with .ab carried (.ab/new.whl: the wheels of 41292b0):
# head_dim 256, never benched: decode and verify (q_len 8) at 8 requests x 32 q / 8 kv heads
# x 16384 tokens beside bf16 (tq bench's custom shape), then a wider sweep of q_len 16 (the
# 64-row tiles of verify-32k-q16) for k3v4_nc: splits 8-32, tiles 64-128, 4 or 8 warps,
# with and without warpgroup products.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
for q in 1 8; do
  echo "== tq bench, head_dim 256, q_len $q"
  PYTHONUNBUFFERED=1 timeout ${T1:-90} python3 -W ignore -m tq_core.cli bench --no-baselines --no-store --shapes custom \
      --batch 8 --q-heads 32 --kv-heads 8 --head-dim 256 --seq-len 16384 --q-len $q \
      --json "$OUT/bench-d256-q$q.json" 2>&1 | grep -v "^Triton" > "$OUT/bench-d256-q$q.log"
  grep -E "^custom" "$OUT/bench-d256-q$q.log" | cut -c1-110
  date -u
done
echo "== sweep q16, k3v4_nc"
PYTHONUNBUFFERED=1 timeout ${T2:-150} python3 -W ignore -m tq_core.cli sweep --no-store --modes prefetch:1 \
    --presets turboquant_k3v4_nc --buckets q16 --gluon 1 --wgmma 0,1 --block-kv 64,128 --warps 4,8 \
    --splits 8,16,32 --min-rows 16 --out "$OUT/sweep-q16.json" 2>&1 | grep -v "^Triton" | grep -E "^  |wrote" | tail -4
date -u
