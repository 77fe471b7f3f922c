#!/usr/bin/env bash
# Call 3, from the repository root with .ab carried (wheels and tests of the working tree): the
# rounding-bias check's numbers per kernel (diag_bias.py), the token-rows tests call 1 did not
# reach (strided index tensors, calibrated hostile metadata) and the rounding-bias tests, then
# compute-sanitizer memcheck of the calibrated and 3-bit-value hostile cases.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
RUN=$PWD/docs/perf/runs/2026-12-04-token-rows-formats
date -u
echo "== diag_bias.py"
( cd .ab/src/packages/tq-triton/tests && PYTHONPATH=/tmp/site-new:. timeout ${T0:-90} python3 -W ignore "$RUN/diag_bias.py" \
    turboquant_k8v4,turboquant_k3v4_nc,turboquant_3bit_nc 4 2>&1 | grep -v "^Triton" | tee "$OUT/diag_bias.log" )
date -u
echo "== token-rows GPU tests: strides, calibrated hostile metadata, rounding bias"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-120} python3 -m pytest tests/test_token_rows_kernel.py \
    -k "strides or calibrated_hostile or rounding" -v -rf --tb=short -p no:cacheprovider -n 16 -W ignore >"$OUT/tr-tests.log" 2>&1; echo "rc=$?"
  grep -E "FAILED|^E  |passed|failed" "$OUT/tr-tests.log" | cut -c1-250 | tail -20 )
date -u
echo "== compute-sanitizer memcheck: calibrated (two column tiles, one) and 3bit_nc hostile cases"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SANITIZE_TIMEOUT:-150} /usr/local/cuda/bin/compute-sanitizer \
    --tool memcheck --error-exitcode 99 python3 -m pytest tests/test_token_rows_kernel.py \
    -k "(calibrated_hostile and t32 and 3-8-1 and (16_columns-3-8-1-tq_k4v3 or 8_columns-3-8-1-tq_k4v4)) or (out_of_range and t32 and 3-8-1-4 and 3bit)" \
    -q -p no:cacheprovider -W ignore >"$OUT/memcheck.log" 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -4 )
date -u
