#!/usr/bin/env bash
# Call 2, from the repository root with .ab carried (.ab/new.whl: the working tree's wheels
# with the Gluon kernel's 4-bit keys and 3-bit values; .ab/src: its tests): the Gluon and
# key-table GPU tests, then cands.py for 4bit_nc and 3bit_nc on every verify bucket and
# decode (GLUON_ONLY: the table's choice against the Gluon candidates; every candidate at
# q4), then the calibrated formats at q4 and tq_k6v5 at q2.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=docs/perf/runs/2026-12-03-every-shape
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
date -u
echo "== GPU tests"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${TEST_TIMEOUT:-130} python3 -m pytest \
    tests/test_gluon_kernel.py tests/test_key_lut.py -q -p no:cacheprovider -n 12 -W ignore \
    >"$OUT/gpu-tests.log" 2>&1; grep -E "^FAILED|passed|failed" "$OUT/gpu-tests.log" | tail -12 )
date -u
echo "== candidates"
GLUON_ONLY=1 PYTHONUNBUFFERED=1 timeout ${T1:-260} python3 -W ignore $HERE/cands.py q8,q8:m64,q2,q4,q16,q1 "$OUT/cands-gluon.json" \
    turboquant_4bit_nc,turboquant_3bit_nc 2>&1 | grep -v "^Triton"
PYTHONUNBUFFERED=1 timeout ${T2:-120} python3 -W ignore $HERE/cands.py q4 "$OUT/cands-q4.json" \
    tq_k4v3,tq_k4v4,tq_k6v5 2>&1 | grep -v "^Triton"
PYTHONUNBUFFERED=1 timeout ${T3:-45} python3 -W ignore $HERE/cands.py q2 "$OUT/cands-q2.json" tq_k6v5 2>&1 \
    | grep -v "^Triton"
date -u
