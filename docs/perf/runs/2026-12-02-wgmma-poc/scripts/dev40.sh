#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u
timeout 220 python3 .ab/ab40.py 2>&1 | grep -v -i "warn\|return \|^  " | tee $OUT/ab40.txt
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 150 python3 -m pytest tests/test_attention.py tests/test_gluon_kernel.py -q -n 8 -p no:cacheprovider -k "balanced or out_of_range or budget" 2>&1 | grep -E "FAILED|ERROR|passed|failed" | tail -12 | tee $OUT/gpu-tests.txt)
date -u
