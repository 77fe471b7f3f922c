#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
cd packages/tq-triton
echo "== gluon tests on the GPU"; TQ_TEST_DEVICE=cuda timeout 200 python3 -m pytest tests/test_gluon_kernel.py -q -n 8 -p no:cacheprovider --tb=line 2>&1 | grep -v "^\.\|Warn" | tail -15
cd ../..
echo "== timing"; timeout 250 python3 .ab/gluon_buf.py 2>&1 | grep -v Warn
cd packages/tq-triton
echo "== memcheck"; TQ_TEST_DEVICE=cuda timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 10 python3 -m pytest tests/test_gluon_kernel.py -q -x -k "two_buffers and (long or out_of_range)" -p no:cacheprovider 2>&1 | grep -E "ERROR SUMMARY|passed|failed|Invalid" | tail -4
