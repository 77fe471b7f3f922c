#!/usr/bin/env bash
# One H200 call: train the byte-level second model (tools/train_byte_llama.py, as in
# docs/perf/runs/2026-12-02-byte-llama), then `tq eval` on it with every format: vLLM's
# four on tq-triton's kernels, tq's calibrated formats on tq-core's reference ops on the
# same GPU (calibrated on that machine's standard-library docstrings).
# Run from the repository root with .whl (tq-core and tq-triton wheels) carried along.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, transformers, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'python', sys.version.split()[0])"
M=/tmp/byte-llama-13m
start=$(date +%s)
[ -f $M/config.json ] || python3 tools/train_byte_llama.py train --out $M --time-budget-s 220 2>&1 \
    | grep -v 'Writing model shards' | tail -5 | tee "$OUT/train-tail.log"
echo "trained: $(( $(date +%s) - start )) s"
python3 -m tq_core.cli eval --model "$M" --device cuda --per-layer -q \
    --json "$OUT/eval-cuda.json" --plot "$OUT/eval-cuda.png" 2>&1 | tee "$OUT/eval-cuda.txt"
echo "total: $(( $(date +%s) - start )) s"
