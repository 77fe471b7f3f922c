#!/usr/bin/env bash
# Call 2, from the repository root with .ab carried (wheels and tests of the working tree: the
# H200 table's new token-rows and norm_mma entries): the token-rows tests that call 1's time
# limit cut off before naming its three failures (verbose, tracebacks), then the whole
# tq bench, one run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
date -u
echo "== token-rows GPU tests: norms, rounding bias, split knobs, long sequences"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-130} python3 -m pytest tests/test_token_rows_kernel.py \
    -k "norms or rounding or split_knobs or long_sequences" -v -rf --tb=short -p no:cacheprovider -n 16 -W ignore >"$OUT/tr-tests.log" 2>&1; echo "rc=$?"
  grep -E "FAILED|passed|failed" "$OUT/tr-tests.log" | cut -c1-250 | tail -20 )
date -u
echo "== tq bench"
PYTHONUNBUFFERED=1 timeout ${T1:-390} python3 -W ignore -m tq_core.cli bench --no-baselines \
    --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | grep -v "^Triton" > "$OUT/bench.log"
grep -vE "^ *$" "$OUT/bench.log" | cut -c1-150 | tail -80
date -u
