#!/usr/bin/env bash
# Call 4, from the repository root with .ab carried (wheels and tests of the working tree: the
# new H200 table entries, the rounding-bias check's head_dim-128 bound): the GPU suite but the
# token-rows file (calls 1 and 3 ran that), the rounding-bias tests, then the same tests with
# the query's rounding compensation removed from the installed tq_triton (they must fail).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
date -u
echo "== GPU suite without tests/test_token_rows_kernel.py"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-320} python3 -m pytest tests \
    --ignore=tests/test_token_rows_kernel.py -v -rf --tb=short -p no:cacheprovider -n 16 -W ignore >"$OUT/gpu-suite.log" 2>&1; echo "rc=$?"
  grep -E "FAILED|passed|failed" "$OUT/gpu-suite.log" | cut -c1-250 | tail -15; grep -c PASSED "$OUT/gpu-suite.log" )
date -u
echo "== rounding bias (token rows, head_dim 128)"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 90 python3 -m pytest tests/test_token_rows_kernel.py \
    -k rounding -q -rf --tb=line -p no:cacheprovider -n 16 -W ignore 2>&1 | grep -E "FAILED|passed|failed|^E " | cut -c1-200 | tail -25 )
date -u
echo "== the same with RTZ_UNBIAS = 1.0 (mutation: must fail)"
sed -i 's/^RTZ_UNBIAS = .*/RTZ_UNBIAS = 1.0/' /tmp/site-new/tq_triton/attention/launch.py
grep -n "^RTZ_UNBIAS" /tmp/site-new/tq_triton/attention/launch.py
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 90 python3 -m pytest tests/test_token_rows_kernel.py \
    -k rounding -q -rf --tb=line -p no:cacheprovider -n 16 -W ignore 2>&1 | grep -E "FAILED|passed|failed|mean relative" | cut -c1-200 | tail -25 )
date -u
