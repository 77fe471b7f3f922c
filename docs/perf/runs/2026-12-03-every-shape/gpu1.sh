#!/usr/bin/env bash
# Call 1, from the repository root with .ab carried (.ab/new.whl: the wheels of the commit
# under test): tq-triton's whole GPU suite, then cands.py over the buckets BUCKETS.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=docs/perf/runs/2026-12-03-every-shape
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
if [ "${SUITE:-1}" = 1 ]; then
    echo "== GPU suite"
    ( cd ${TESTS_ROOT:-.ab/src}/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-200} python3 -m pytest tests \
        -q -p no:cacheprovider -n 12 -W ignore >"$OUT/gpu-suite.log" 2>&1; tail -6 "$OUT/gpu-suite.log" )
    date -u
fi
echo "== candidates: ${BUCKETS:=q16,q2,q4}"
PYTHONUNBUFFERED=1 timeout ${CANDS_TIMEOUT:-380} python3 -W ignore $HERE/cands.py "$BUCKETS" "$OUT/cands.json" 2>&1 \
    | grep -v "^Triton"
date -u
