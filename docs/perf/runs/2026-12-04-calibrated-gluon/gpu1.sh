#!/usr/bin/env bash
# Call 1, from the repository root with .ab carried (.ab/new.whl: the working tree's wheels
# with the Gluon kernel's calibrated formats; .ab/src: its tests): the Gluon, calibrated and
# key-table GPU tests, then cands.py at every named shape.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=docs/perf/runs/2026-12-04-calibrated-gluon
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
date -u
echo "== GPU tests"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${TEST_TIMEOUT:-200} python3 -m pytest \
    tests/test_gluon_kernel.py tests/test_calibrated.py tests/test_key_lut.py -k "${TEST_K:-tq_k4 or calibrated or applies or compiles}" \
    -q -p no:cacheprovider -n 12 -W ignore >"$OUT/gpu-tests.log" 2>&1; grep -E "^FAILED|passed|failed|rror" "$OUT/gpu-tests.log" | tail -15 )
grep -E "cross-kernel tq_k4" "$OUT/gpu-tests.log" | head -20
date -u
echo "== candidates"
PYTHONUNBUFFERED=1 timeout ${T1:-300} python3 -W ignore $HERE/cands.py "$OUT/cands.json" 2>&1 | grep -v "^Triton"
date -u
