#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 260 python3 .ab/ab36.py 2>&1 | grep -v Warn | tee $OUT/ab36.txt
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 280 python3 -m pytest tests/test_gluon_kernel.py tests/test_attention_numerics.py tests/test_attention.py tests/test_value_words.py -q -n 8 -p no:cacheprovider 2>&1 | grep -E "FAILED|ERROR|passed|failed" | tail -30 | tee $OUT/gpu-tests.txt)
