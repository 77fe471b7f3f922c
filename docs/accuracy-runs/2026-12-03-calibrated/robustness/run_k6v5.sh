#!/bin/bash
export TQ_CACHE_DIR=/work/main/.nox/tq-cache
cd /tmp/p30/robust
for name in docs16 docs4 docs1 source16 insample16; do
  python -m tq_core.cli eval -q --formats tq_k6v5 --calibration cal_$name.pt --json k6v5_$name.json > k6v5_$name.txt
  echo "== $name"; grep -E "^tq_" k6v5_$name.txt
done
