#!/usr/bin/env bash
# One H200 call, after tq-triton gained the calibrated formats' kernels: train the
# byte-level second model again (as h200.sh), then `tq eval` on it with every format on
# tq-triton's kernels (the calibrated formats included), and the calibrated formats once
# more on tq-core's reference ops on the same GPU and model, as a cross-check of the kernels.
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
    --json "$OUT/eval-triton.json" --plot "$OUT/eval-triton.png" 2>&1 | tee "$OUT/eval-triton.txt"
python3 -m tq_core.cli eval --model "$M" --device cuda --backend core -q \
    --formats tq_k4v3,tq_k4v4,tq_k6v5 --json "$OUT/eval-core.json" 2>&1 | tee "$OUT/eval-core.txt"
echo "total: $(( $(date +%s) - start )) s"
