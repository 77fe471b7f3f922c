#!/usr/bin/env bash
# Call 2, from the repository root with .ab carried (.ab/new.whl: the working tree's wheels,
# the H200 table with the calibrated formats' Gluon entries; .ab/old: main's table before
# them): cands.py at every named shape (the new entries, the old ones, 32-token tiles at
# verify-32k), then tq bench's default run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=docs/perf/runs/2026-12-04-calibrated-gluon
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
date -u
echo "== candidates"
OLD_TABLE_DIR=$PWD/.ab/old B32=1 PYTHONUNBUFFERED=1 timeout ${T1:-240} python3 -W ignore $HERE/cands.py "$OUT/cands2.json" 2>&1 | grep -v "^Triton"
date -u
echo "== tq bench"
PYTHONUNBUFFERED=1 timeout ${T2:-330} python3 -W ignore -m tq_core.cli bench --no-baselines \
    --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | grep -v "^Triton" | tee "$OUT/bench.log" | tail -80
date -u
