#!/usr/bin/env bash
# Call 3, from the repository root with .ab carried (the wheels and tests of call 2): tq bench
# at verify-32k q_len 4 (the shape the new entries change), the whole GPU suite, then
# compute-sanitizer memcheck of k3v4_nc's hostile cases with two column tiles.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== tq bench verify-32k-q4"
PYTHONUNBUFFERED=1 timeout ${T1:-90} python3 -W ignore -m tq_core.cli bench --no-baselines --shapes verify-32k-q4 \
    --json "$OUT/bench.json" 2>&1 | grep -v "^Triton" > "$OUT/bench.log"
grep -E "^verify-32k-q4" "$OUT/bench.log" | cut -c1-130
date -u
echo "== GPU suite"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-380} python3 -m pytest tests \
    -q -p no:cacheprovider -n 16 -W ignore >"$OUT/gpu-suite.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|passed|failed" "$OUT/gpu-suite.log" | tail -8 )
date -u
echo "== compute-sanitizer memcheck (two column tiles, k3v4_nc)"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SANITIZE_TIMEOUT:-60} /usr/local/cuda/bin/compute-sanitizer \
    --tool memcheck --error-exitcode 99 python3 -m pytest tests/test_token_rows_kernel.py \
    -k "out_of_range and t32 and 3-8-1-4 and k3v4" \
    -q -p no:cacheprovider -W ignore -x >"$OUT/memcheck.log" 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -4 )
date -u
