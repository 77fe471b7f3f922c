#!/usr/bin/env bash
# call 1: tq_k6v5 decode A/B (gather vs fp16 polynomial vs small-float bit trick; timing only),
# then tq-core's suite and tq-triton's key_poly/calibrated tests on the GPU (main = 453b09a)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/ab"
export TQ_TUNING_DIR=$PWD/.dev/ut
T0=$(date +%s)
for ref in main exp-k6-poly exp-k6-float; do
  mkdir -p /tmp/site-$ref
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl
done
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
SH=${AB_SHAPES:-decode-32k,verify-32k-q4,verify-32k-q16}
for round in 1 2; do for ref in main exp-k6-poly exp-k6-float; do
  extra=--no-baselines; [ $round = 1 ] && [ $ref = main ] && extra=
  PYTHONPATH=/tmp/site-$ref timeout 150 python3 -m tq_core.cli bench --kernel portable --shapes $SH --presets tq_k6v5,turboquant_k8v4 \
    $extra --no-store --json "$OUT/ab/$ref-r$round.json" > "$OUT/ab/$ref-r$round.log" 2>&1
  echo "-- $ref r$round rc=$? t=$(( $(date +%s) - T0 ))"; grep -E 'tq_k6v5|k8v4|bf16' "$OUT/ab/$ref-r$round.log" | head -12
  [ $(( $(date +%s) - T0 )) -gt ${AB_UNTIL:-200} ] && break 2
done; done
[ $(( $(date +%s) - T0 )) -lt ${TESTS_IF_BEFORE:-260} ] && {
echo "== tq-core suite on the GPU machine t=$(( $(date +%s) - T0 ))"
( cd .ab/main/packages/tq-core && PYTHONPATH=/tmp/site-main timeout 80 python3 -m pytest tests -q -p no:cacheprovider -n 16 -W ignore > "$OUT/core-tests.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/core-tests.log" | tail -6 )
echo "== tq-triton key_poly, calibrated (quick) t=$(( $(date +%s) - T0 ))"
( cd .ab/main/packages/tq-triton && PYTHONPATH=/tmp/site-main TQ_TEST_DEVICE=cuda TQ_TEST_QUICK=1 timeout ${T_TESTS:-90} python3 -m pytest tests/test_key_poly.py tests/test_calibrated.py tests/test_attention_numerics.py -q -p no:cacheprovider -n 16 -W ignore > "$OUT/triton-tests.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/triton-tests.log" | tail -8 )
}
echo "total t=$(( $(date +%s) - T0 ))"
cd "$OUT" && tar czf logs.tgz ab $(ls core-tests.log triton-tests.log 2>/dev/null); rm -f core-tests.log triton-tests.log ab/*.log
