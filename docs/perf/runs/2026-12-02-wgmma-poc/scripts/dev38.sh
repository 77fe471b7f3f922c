#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u
timeout 560 python3 -m tq_core.cli bench --json $OUT/bench.json --plot $OUT/bench.png 2>&1 | grep -v -i "warn\|return \|^  " | tee $OUT/bench.txt
date -u
