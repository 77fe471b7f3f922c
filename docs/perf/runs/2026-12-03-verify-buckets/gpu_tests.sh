#!/usr/bin/env bash
# Device call 3: tq-triton's GPU suite with the new table (.ab/new.whl: main's tq-core and the
# working tree's tq-triton), from the repository root with .ab carried; OUT gets the log.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
site=/tmp/site-new; mkdir -p $site
python3 -m pip install -q --no-index --no-deps --no-compile --target $site .ab/new.whl/*.whl
export PYTHONPATH=$site TQ_TEST_DEVICE=cuda PATH=$site/bin:$PATH
python3 -c "import torch, triton, tq_triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -m pytest packages/tq-triton/tests -q -p no:cacheprovider -n 12 -W ignore >"$OUT/gpu-tests.log" 2>&1
tail -8 "$OUT/gpu-tests.log"
