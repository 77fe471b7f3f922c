#!/usr/bin/env bash
# Call 1, from the repository root with .ab carried (wheels and tests of main 540c68f): the
# token-rows GPU tests (3-bit values, calibrated formats, norms on the matrix unit, rounding
# bias: first time on a GPU), then time_tr.py at decode-32k, verify-32k-q2 and -q4.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
RUN=$PWD/docs/perf/runs/2026-12-04-token-rows-formats
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== token-rows GPU tests"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-230} python3 -m pytest tests/test_token_rows_kernel.py \
    -q -p no:cacheprovider -n 16 -W ignore >"$OUT/tr-tests.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/tr-tests.log" | cut -c1-220 | tail -25 )
date -u
tr() {  # name timeout args...
    local name=$1 t=$2; shift 2
    mkdir -p "$OUT/$name"
    ( cd "$OUT/$name" && PYTHONUNBUFFERED=1 timeout "$t" python3 -W ignore "$RUN/time_tr.py" "$@" 2>&1 | grep -v "^Triton" | tee "$OUT/$name.log" )
    date -u
}
echo "== decode-32k"
tr dec-new 110 decode-32k turboquant_3bit_nc,tq_k4v3,tq_k4v4 32:0:64 16:0:64 32:0:64:1 16:0:64:1
tr dec-nm 50 decode-32k turboquant_k3v4_nc 64:0:32 64:0:32:1
tr dec-nm4 40 decode-32k turboquant_4bit_nc 16:0:64:1
echo "== verify-32k q_len 2 and 4"
tr q24-new 130 verify-32k-q2,verify-32k-q4 turboquant_3bit_nc,tq_k4v3,tq_k4v4 32:16:0 16:16:0 32:16:0:1
tr q24-nm 60 verify-32k-q2,verify-32k-q4 turboquant_k3v4_nc,turboquant_4bit_nc 32:16:0:1
