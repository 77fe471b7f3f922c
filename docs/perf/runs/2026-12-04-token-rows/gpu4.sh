#!/usr/bin/env bash
# Call 4, from the repository root with .ab carried (wheels and tests of the final tree: the
# token-rows kernel with 4-bit keys, q1 entries for k8v4, k3v4_nc and 4bit_nc, q2:d128
# entries for all three): tq bench on the two shapes the entries change (decode-32k,
# verify-32k-q2), the whole GPU suite, compute-sanitizer memcheck of 4bit_nc's hostile cases.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== tq bench decode-32k,verify-32k-q2"
PYTHONUNBUFFERED=1 timeout ${T1:-120} python3 -W ignore -m tq_core.cli bench --no-baselines --shapes decode-32k,verify-32k-q2 \
    --json "$OUT/bench.json" 2>&1 | grep -v "^Triton" > "$OUT/bench.log"
grep -E "^decode-32k|^verify-32k-q2" "$OUT/bench.log" | cut -c1-110
date -u
echo "== GPU suite"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-250} python3 -m pytest tests \
    -q -p no:cacheprovider -n 16 -W ignore >"$OUT/gpu-suite.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|passed|failed" "$OUT/gpu-suite.log" | tail -8 )
date -u
echo "== compute-sanitizer memcheck"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SANITIZE_TIMEOUT:-60} /usr/local/cuda/bin/compute-sanitizer \
    --tool memcheck --error-exitcode 99 python3 -m pytest tests/test_token_rows_kernel.py \
    -k "4bit and ((out_of_range and t32 and (3-8-1 or 1-0-0)) or (strided and all))" \
    -q -p no:cacheprovider -W ignore -x >"$OUT/memcheck.log" 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -4 )
date -u
