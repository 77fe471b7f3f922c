#!/usr/bin/env bash
# Call 1, from the repository root with .ab carried (.ab/new.whl: the wheels of the tree with
# the folded norms; .ab/src: its tests): the GPU tests of the calibrated formats (store and
# attention against tq-core, the Gluon kernel's calibrated cases, the register tables), then
# tq bench's default run (every format at every shape, beside the fastest bf16 kernel).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== GPU tests: calibrated formats, store, Gluon calibrated, register tables"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${TESTS_TIMEOUT:-150} python3 -m pytest \
    tests/test_calibrated.py tests/test_store.py tests/test_key_lut.py tests/test_gluon_kernel.py \
    -q -p no:cacheprovider -n 16 -W ignore >"$OUT/gpu-tests.log" 2>&1; grep -E "^FAILED|passed|failed" "$OUT/gpu-tests.log" | tail -8 )
date -u
echo "== tq bench"
PYTHONUNBUFFERED=1 timeout ${T2:-330} python3 -W ignore -m tq_core.cli bench --no-baselines \
    --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | grep -v "^Triton" | tee "$OUT/bench.log" | tail -80
date -u
