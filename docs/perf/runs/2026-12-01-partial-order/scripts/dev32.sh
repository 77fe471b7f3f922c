#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
git log --oneline -1; date -u
timeout 270 python3 .ab/sweep32.py 2>&1 | grep -v Warn | tee $OUT/sweep32.txt
cd packages/tq-triton
TQ_SPLIT_BUDGET=2 TQ_TEST_DEVICE=cuda timeout 150 python3 -m pytest tests/test_gluon_kernel.py tests/test_attention.py -q -n 8 -p no:cacheprovider 2>&1 | tail -3 | tee $OUT/gpu-tests-b2.txt
TQ_TEST_DEVICE=cuda timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m pytest tests/test_memory_safety.py -q -p no:cacheprovider -x 2>&1 | tail -5 | tee $OUT/memcheck.txt
