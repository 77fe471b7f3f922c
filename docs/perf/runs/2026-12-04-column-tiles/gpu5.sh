#!/usr/bin/env bash
# Call 5, from the repository root with .ab carried (the wheels of calls 2-4): tq bench at the
# three shapes the token-rows kernel runs in the H200 table (decode-32k, verify-32k at q_len 2
# and 4), one run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
date -u
PYTHONUNBUFFERED=1 timeout ${T1:-170} python3 -W ignore -m tq_core.cli bench --no-baselines --shapes decode-32k,verify-32k-q2,verify-32k-q4 \
    --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | grep -v "^Triton" > "$OUT/bench.log"
grep -E "^decode-32k|^verify-32k-q|gate" "$OUT/bench.log" | cut -c1-130
date -u
