#!/usr/bin/env bash
# Call 5, from the repository root with .ab carried (.ab/new.whl: the wheels with
# `tq sweep --head-dim`): head_dim 256, decode (q1) and verify (q8), for k8v4 and k3v4_nc,
# the portable and the Gluon kernel; one sweep per preset and bucket so that each table
# survives a timeout.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
date -u
for p in turboquant_k3v4_nc turboquant_k8v4; do
  echo "== $p q1 d256"
  PYTHONUNBUFFERED=1 timeout ${T1:-55} python3 -W ignore -m tq_core.cli sweep --no-store --modes prefetch:1 --head-dim 256 \
      --presets $p --buckets q1 --gluon 0,1 --block-kv 32 --warps 1,2,4 --splits 0 --waves 16,64 \
      --out "$OUT/sweep-d256-q1-$p.json" 2>&1 | grep -E "^  " | cut -c1-200
  echo "== $p q8 d256"
  PYTHONUNBUFFERED=1 timeout ${T2:-45} python3 -W ignore -m tq_core.cli sweep --no-store --modes prefetch:1 --head-dim 256 \
      --presets $p --buckets q8 --gluon 0,1 --block-kv 32,64 --warps 2,4 --splits 16 \
      --out "$OUT/sweep-d256-q8-$p.json" 2>&1 | grep -E "^  " | cut -c1-200
  date -u
done
