#!/usr/bin/env bash
# Call 2, from the repository root with .ab carried (wheels and tests of the tree with the
# q4:d128 entries of k8v4, k3v4_nc and 4bit_nc on the token-rows kernel): tq bench's default
# run (every format at every shape beside the fastest bf16 kernel), then compute-sanitizer
# memcheck of the token-rows kernel's hostile cases with two column tiles, and the whole GPU
# suite.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== tq bench"
PYTHONUNBUFFERED=1 timeout ${T1:-280} python3 -W ignore -m tq_core.cli bench --no-baselines \
    --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | grep -v "^Triton" > "$OUT/bench.log"
grep -E "^verify-32k-q4|gate|missed|met" "$OUT/bench.log" | cut -c1-150 | tail -30
date -u
echo "== compute-sanitizer memcheck (two column tiles)"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SANITIZE_TIMEOUT:-90} /usr/local/cuda/bin/compute-sanitizer \
    --tool memcheck --error-exitcode 99 python3 -m pytest tests/test_token_rows_kernel.py \
    -k "(out_of_range and t32 and (3-8-1-4 or 1-0-0-4)) or (long_sequences and 16_columns and t32)" \
    -q -p no:cacheprovider -W ignore -x >"$OUT/memcheck.log" 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -4 )
date -u
if [ -n "${SUITE:-}" ]; then
echo "== GPU suite"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-400} python3 -m pytest tests \
    -q -p no:cacheprovider -n 16 -W ignore >"$OUT/gpu-suite.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|passed|failed" "$OUT/gpu-suite.log" | tail -8 )
date -u
fi
