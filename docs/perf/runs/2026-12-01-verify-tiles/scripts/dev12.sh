#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
T0=$(date +%s)
echo "== compile workers"; for i in $(seq 0 13); do python3 .ab/sweep12.py compile $i 14 2>>$OUT/compile.err >/dev/null & done
echo "== bench baselines test on cuda (while compiling)"
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 120 python3 -m pytest tests/test_bench_baselines.py -q -p no:cacheprovider -rs > $OUT/baselines.log 2>&1; echo "rc=$?"; tail -3 $OUT/baselines.log)
wait; echo "compiled in $(( $(date +%s) - T0 ))s"; tail -2 $OUT/compile.err
echo "== time"; timeout 200 python3 .ab/sweep12.py time
echo "== store code_search A/B"; timeout 90 python3 .ab/store12.py
echo "== ragged bench"; timeout 120 python3 -m tq_core.cli bench --shapes ragged --no-store 2>&1 | tail -12
echo "total $(( $(date +%s) - T0 ))s"
