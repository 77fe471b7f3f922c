#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
for v in old v1 v2; do cp .ab/gk_$v.py packages/tq-triton/src/tq_triton/attention/gluon_kernel_$v.py; done
timeout 330 python3 .ab/ab27.py 2>&1 | grep -v Warn
rm packages/tq-triton/src/tq_triton/attention/gluon_kernel_{old,v1,v2}.py
cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 200 python3 -m pytest tests/test_gluon_kernel.py tests/test_attention.py tests/test_memory_safety.py -q -n 8 -p no:cacheprovider 2>&1 | tail -4
