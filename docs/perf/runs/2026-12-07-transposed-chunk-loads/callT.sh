#!/usr/bin/env bash
# A/B on the portable kernel: 3-bit chunk words loaded transposed (exp-trans3) vs main (453b09a);
# then tq_k6v5 decoders (gather = main, fp16 polynomial, small float), as time allows.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/ab"
export TQ_TUNING_DIR=$PWD/.dev/ut
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
for ref in main exp-trans3 exp-k6-poly exp-k6-float; do mkdir -p /tmp/site-$ref
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl; done
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
run() { # ref tag presets shapes extra
  PYTHONPATH=/tmp/site-$1 timeout ${RUN_T:-150} python3 -m tq_core.cli bench --kernel portable --shapes $4 \
    --presets $3 $5 --no-store --json "$OUT/ab/$2.json" > "$OUT/ab/$2.log" 2>&1
  echo "-- $2 rc=$? t=$(el)"; grep -E 'turboquant|tq_k|bf16' "$OUT/ab/$2.log" | head -16; }
P3=turboquant_k3v4_nc,turboquant_3bit_nc,tq_k4v3
S3=${S3:-decode-32k,verify-32k-q4,verify-32k-q16,decode-d256}
run main T-main-r1 $P3 $S3 ""
run exp-trans3 T-trans-r1 $P3 $S3 --no-baselines
run main T-main-r2 $P3 $S3 --no-baselines
run exp-trans3 T-trans-r2 $P3 $S3 --no-baselines
S6=${S6:-decode-32k,verify-32k-q4}
for ref in main exp-k6-poly exp-k6-float; do
  [ $(el) -gt ${K6_UNTIL:-430} ] && break
  run $ref K-$ref tq_k6v5 $S6 --no-baselines
done
echo "total t=$(el)"
