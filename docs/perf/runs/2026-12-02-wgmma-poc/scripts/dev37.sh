#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u
timeout 230 python3 .ab/ab37.py 2>&1 | grep -v -i "warn\|return \|^  " | tee $OUT/ab37.txt
cd packages/tq-triton
for gl in 3 0; do
TQ_GLUON=$gl TQ_TEST_DEVICE=cuda timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m pytest tests/test_memory_safety.py -q -p no:cacheprovider -n 4 2>&1 | tail -3 | tee $OUT/memcheck-g$gl.txt
done
