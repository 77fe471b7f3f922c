#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
git log --oneline -1; git status --short | head; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
timeout 60 python3 .ab/ragged29.py 2>&1 | grep -v Warn | tee $OUT/ragged29.txt
timeout 300 python3 -m tq_core.cli bench --json $OUT/bench.json --plot $OUT/bench.png 2>&1 | grep -v Warn | tee $OUT/bench.txt | tail -40
cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 170 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m pytest tests/test_memory_safety.py -q -p no:cacheprovider -x 2>&1 | tail -5 | tee $OUT/memcheck.txt
