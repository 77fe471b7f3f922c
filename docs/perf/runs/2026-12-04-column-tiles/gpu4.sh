#!/usr/bin/env bash
# Call 4, from the repository root with .ab carried (the wheels and tests of calls 2-3): the
# token-rows kernel's GPU tests to the end (call 3's whole suite stopped at its time limit
# with 2953 of 2958 tests reported, none failed), with each test's outcome.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
date -u
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-320} python3 -m pytest tests/test_token_rows_kernel.py \
    -v -p no:cacheprovider -n 16 -W ignore --durations=10 >"$OUT/tr-tests.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|passed|failed" "$OUT/tr-tests.log" | tail -8; grep -A12 "slowest" "$OUT/tr-tests.log" )
date -u
