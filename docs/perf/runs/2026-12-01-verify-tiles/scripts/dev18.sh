#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
T0=$(date +%s)
echo "== bench (tree 5ce749d)"; date -u
timeout 140 python3 -m tq_core.cli bench --json $OUT/bench.json --plot $OUT/bench.png 2>&1 | grep -v "Warning\|warn(\|return \[" | tail -26
echo "== whole tq-triton suite on the GPU t=$(( $(date +%s) - T0 ))s"
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 140 python3 -m pytest tests -q -n 8 -p no:cacheprovider > $OUT/gpu-all.log 2>&1; echo "rc=$?"; grep -E "passed|failed|Error" $OUT/gpu-all.log | tail -4)
echo "total $(( $(date +%s) - T0 ))s"
