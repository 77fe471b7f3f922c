#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
T0=$(date +%s)
echo "== bench, new table"; date -u
timeout 150 python3 -m tq_core.cli bench --json $OUT/bench.json --plot $OUT/bench.png 2>&1 | grep -v "Warning\|warn(\|return \[" | tail -26
echo "== bench, HEAD's table t=$(( $(date +%s) - T0 ))s"
TQ_TUNING_DIR=$PWD/.ab/old_tables timeout 150 python3 -m tq_core.cli bench --json $OUT/bench-old-table.json 2>&1 | grep -v "Warning\|warn(\|return \[" | tail -26
echo "== whole tq-triton suite on the GPU t=$(( $(date +%s) - T0 ))s"
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 170 python3 -m pytest tests -q -n 8 -p no:cacheprovider > $OUT/gpu-all.log 2>&1; echo "rc=$?"; grep -E "passed|failed|Error" $OUT/gpu-all.log | tail -6)
echo "== memcheck test_memory_safety t=$(( $(date +%s) - T0 ))s"
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 110 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 10 python3 -m pytest tests/test_memory_safety.py -q -p no:cacheprovider > $OUT/memcheck.log 2>&1; grep -E "ERROR SUMMARY|passed|failed|Invalid" $OUT/memcheck.log | tail -4)
echo "total $(( $(date +%s) - T0 ))s"
