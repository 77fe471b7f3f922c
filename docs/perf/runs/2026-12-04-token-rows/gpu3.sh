#!/usr/bin/env bash
# Call 3 (same wheels as call 2): the token-rows kernel timed at verify-32k's q_len 2 (8 query
# columns at 4 q heads per kv head: one query chunk per program), then a mutation: the value
# product's A registers of the high nibbles and of tokens 2c + 8 swapped in an installed copy,
# under which the kernel's reference tests must fail.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export TQ_TUNING_DIR=/tmp/no-user-tables
date -u
echo "== time_tr verify-32k-q2"
( cd "$OUT" && PYTHONPATH=/tmp/site-new PYTHONUNBUFFERED=1 timeout ${T2:-200} python3 -W ignore "$OLDPWD/docs/perf/runs/2026-12-04-token-rows/time_tr.py" verify-32k-q2 2>&1 | grep -v "^Triton" > time_tr_q2.log; grep -E "bf16|table|failed" time_tr_q2.log; grep " tr " time_tr_q2.log | sort -t: -k2 -n | head -6 )
date -u
echo "== mutation"
cp -r /tmp/site-new /tmp/site-mut
sed -i 's/a0, a1, a2, a3}}, {{\$9/a0, a2, a1, a3}}, {{$9/' /tmp/site-mut/tq_triton/attention/token_rows_ptx.py
grep -c "a0, a2, a1, a3" /tmp/site-mut/tq_triton/attention/token_rows_ptx.py
( cd .ab/src/packages/tq-triton && PYTHONPATH=/tmp/site-mut TQ_TEST_DEVICE=cuda timeout 120 python3 -m pytest tests/test_token_rows_kernel.py \
    -k "matches_reference and t32" -q -p no:cacheprovider -n 8 -W ignore 2>&1 | tail -2 )
date -u
