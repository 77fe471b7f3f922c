#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
git log --oneline -1; date -u
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 150 python3 -m pytest tests/test_gluon_kernel.py tests/test_attention.py -q -n 8 -p no:cacheprovider 2>&1 | tail -4 | tee $OUT/gpu-tests.txt)
(cd packages/tq-triton && TQ_SPLIT_BUDGET=2 TQ_TEST_DEVICE=cuda timeout 100 python3 -m pytest tests/test_gluon_kernel.py tests/test_attention.py -q -x -p no:cacheprovider --tb=short 2>&1 | tail -45 > $OUT/gpu-tests-b2.txt; tail -3 $OUT/gpu-tests-b2.txt)
timeout 250 python3 .ab/prof33.py 2>&1 | grep -v Warn | tee $OUT/prof33.txt
