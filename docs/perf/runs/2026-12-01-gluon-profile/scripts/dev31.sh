#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u
cp .ab/gk_head.py packages/tq-triton/src/tq_triton/attention/gluon_kernel_head.py
timeout 90 python3 .ab/ab31.py 2>&1 | grep -v Warn | tee $OUT/ab31.txt
rm packages/tq-triton/src/tq_triton/attention/gluon_kernel_head.py
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 150 python3 -m pytest tests/test_key_lut.py tests/test_gluon_kernel.py tests/test_attention.py -q -n 8 -p no:cacheprovider 2>&1 | tail -2 | tee $OUT/gpu-tests.txt)
timeout 200 python3 -m tq_core.cli bench --json $OUT/bench.json --plot $OUT/bench.png 2>&1 | grep -v -i "warn\|sdpa\|scaled_dot\|reqs\]" | tee $OUT/bench.txt | tail -30
