#!/usr/bin/env bash
# Call 3, from the repository root with .ab carried (.ab/new.whl: the wheels of the final
# tree; .ab/src: its tests): the whole GPU suite, then compute-sanitizer memcheck of the
# memory-safety tests and the Gluon kernel's hostile ones (the calibrated formats' included),
# then cands.py for the calibrated formats with the final kernel and table, then, where
# STORE_CANDS names it, the store candidates' script.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== GPU suite"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-170} python3 -m pytest tests \
    -q -p no:cacheprovider -n 16 -W ignore >"$OUT/gpu-suite.log" 2>&1; grep -E "^FAILED|passed|failed" "$OUT/gpu-suite.log" | tail -8 )
date -u
echo "== compute-sanitizer memcheck"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SANITIZE_TIMEOUT:-120} /usr/local/cuda/bin/compute-sanitizer \
    --tool memcheck --error-exitcode 99 python3 -m pytest tests/test_memory_safety.py tests/test_gluon_kernel.py \
    -k "test_memory_safety or (out_of_range and 4bit and 3-8-1) or (calibrated_hostile and (3-8-1 or 1-0-0))" \
    -q -p no:cacheprovider -W ignore -x >"$OUT/memcheck.log" 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -4 )
date -u
echo "== candidates"
PYTHONUNBUFFERED=1 timeout ${T1:-150} python3 -W ignore docs/perf/runs/2026-12-04-calibrated-gluon/cands.py "$OUT/cands3.json" 2>&1 | grep -v "^Triton"
date -u
if [ -n "${STORE_CANDS:-}" ]; then
  echo "== store candidates"
  PYTHONUNBUFFERED=1 timeout ${STORE_TIMEOUT:-200} python3 -W ignore $STORE_CANDS 2>&1 | grep -v "^Triton" | tail -40
  date -u
fi
