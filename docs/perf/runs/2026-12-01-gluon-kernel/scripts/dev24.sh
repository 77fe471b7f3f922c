#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 200 python3 -m pytest tests -q -n 8 -p no:cacheprovider > $OUT/gpu-all.log 2>&1; echo "rc=$?"; grep -E "passed|failed|Error" $OUT/gpu-all.log | tail -6)
