#!/usr/bin/env bash
# 3-bit chunk words loaded transposed (exp-trans3) against main (453b09a), portable kernel
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/ab"
export TQ_TUNING_DIR=$PWD/.dev/ut
T0=$(date +%s)
for ref in main exp-trans3; do mkdir -p /tmp/site-$ref
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl; done
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; date -u
for round in 1 2; do for ref in main exp-trans3; do
  extra=--no-baselines; [ $round = 1 ] && [ $ref = main ] && extra=
  PYTHONPATH=/tmp/site-$ref timeout 120 python3 -m tq_core.cli bench --kernel portable --shapes ${AB_SHAPES:-decode-32k,verify-32k-q4} \
    --presets turboquant_k3v4_nc,tq_k4v3 $extra --no-store --json "$OUT/ab/$ref-r$round.json" > "$OUT/ab/$ref-r$round.log" 2>&1
  echo "-- $ref r$round rc=$? t=$(( $(date +%s) - T0 ))"; grep -E 'k3v4|tq_k4v3|bf16' "$OUT/ab/$ref-r$round.log" | head -8
  [ $(( $(date +%s) - T0 )) -gt ${AB_UNTIL:-150} ] && break 2
done; done
echo "total t=$(( $(date +%s) - T0 ))"
