#!/usr/bin/env bash
# Call 1, from the repository root with .ab carried (wheels and tests of the working tree: the
# token-rows kernel with one or two column tiles): the token-rows GPU tests, tq bench on the
# shapes the kernel runs or may run (decode-32k, verify-32k at q_len 2 and 4; table entries
# unchanged), time_ct.py's configurations at q_len 4.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== token-rows GPU tests"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-200} python3 -m pytest tests/test_token_rows_kernel.py \
    -q -p no:cacheprovider -n 16 -W ignore >"$OUT/tr-tests.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|passed|failed" "$OUT/tr-tests.log" | tail -12 )
date -u
echo "== tq bench decode-32k,verify-32k-q2,verify-32k-q4"
PYTHONUNBUFFERED=1 timeout ${T1:-150} python3 -W ignore -m tq_core.cli bench --no-baselines --shapes decode-32k,verify-32k-q2,verify-32k-q4 \
    --json "$OUT/bench.json" 2>&1 | grep -v "^Triton" > "$OUT/bench.log"
grep -E "^decode-32k|^verify-32k-q" "$OUT/bench.log" | cut -c1-130
date -u
echo "== time_ct.py verify-32k-q4"
( cd "$OUT" && PYTHONUNBUFFERED=1 timeout ${T2:-200} python3 -W ignore "$OLDPWD/docs/perf/runs/2026-12-04-column-tiles/time_ct.py" \
    verify-32k-q4 turboquant_k3v4_nc,turboquant_k8v4,turboquant_4bit_nc 32:16:0 16:16:0 64:16:0 32:0:32 32:8:0 2>&1 | grep -v "^Triton" | tee "$OUT/time_ct.log" )
date -u
