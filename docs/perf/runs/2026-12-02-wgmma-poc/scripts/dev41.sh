#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 130 python3 -m pytest tests/test_gluon_kernel.py tests/test_attention_numerics.py tests/test_attention.py -q -n 12 -p no:cacheprovider 2>&1 | grep -E "FAILED|ERROR|passed|failed" | tail -12 | tee $OUT/gpu-tests.txt)
date -u
timeout 100 python3 .ab/ab41.py 2>&1 | grep -v -i "warn\|return \|^  " | tee $OUT/ab41.txt
date -u
