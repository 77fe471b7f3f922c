#!/usr/bin/env bash
# One H200 call: tq-triton's GPU suite, then `tq eval` on the byte-level model trained on
# that machine (docs/perf/runs/2026-12-02-byte-llama), once with tq-triton's kernels
# (--device cuda) and once with tq-core's reference path on the same machine's CPU.
# Run from the repository root with .whl (tq-core and tq-triton wheels built from the
# checkout) and .models carried along.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
git rev-parse HEAD 2>/dev/null || true
M=.models/byte-llama-13m
start=$(date +%s)
TQ_TEST_DEVICE=cuda timeout 300 python3 -m pytest packages/tq-triton/tests -q -n 8 -p no:cacheprovider 2>&1 \
    | tail -8 | tee "$OUT/gpu-tests.txt"
echo "gpu tests: $(( $(date +%s) - start )) s"
for dev in cuda cpu; do
    python3 -m tq_core.cli eval --model "$M" --device "$dev" --boundary-layers 0 2 --per-layer -q \
        --json "$OUT/eval-$dev.json" --plot "$OUT/eval-$dev.png" 2>&1 | tee "$OUT/eval-$dev.txt"
done
echo "total: $(( $(date +%s) - start )) s"
