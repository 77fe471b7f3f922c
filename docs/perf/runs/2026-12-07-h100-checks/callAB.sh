#!/usr/bin/env bash
# One call: byte-llama-13m trains in the background while the GPU tests of the changed code and
# a memcheck run (correctness only; the training's time budget shares the machine), then the
# calibrated store A/B 7eb9154 vs HEAD alone, then tq eval on the new model.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TQ_TUNING_DIR=$PWD/.dev/ut
S=/tmp/site-head; mkdir -p $S
python3 -m pip install -q --no-index --no-deps --no-compile --target $S .ab/HEAD.whl/*.whl
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
date -u; T0=$(date +%s)
M=/tmp/byte-llama-13m
( PYTHONPATH=$S python3 tools/train_byte_llama.py train --out $M --time-budget-s ${TRAIN_S:-200} 2>&1 \
    | grep -v 'Writing model shards' > "$OUT/train.log" ) &
TRAIN=$!
echo "== GPU tests (changed files, quick)"
( cd .ab/HEAD/packages/tq-triton && PYTHONPATH=$S TQ_TEST_DEVICE=cuda TQ_TEST_QUICK=1 timeout ${SUITE_TIMEOUT:-130} python3 -m pytest \
    tests/test_store.py tests/test_calibrated.py tests/test_key_poly.py tests/test_gluon_kernel.py tests/test_attention.py \
    -q -p no:cacheprovider -n 14 -W ignore >"$OUT/gpu-tests.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/gpu-tests.log" | tail -12 )
echo "t=$(( $(date +%s) - T0 )) s"
echo "== compute-sanitizer memcheck (calibrated store and hostile)"
( cd .ab/HEAD/packages/tq-triton && PYTHONPATH=$S TQ_TEST_DEVICE=cuda TQ_TEST_QUICK=1 timeout ${SANITIZE_TIMEOUT:-60} /usr/local/cuda/bin/compute-sanitizer \
    --tool memcheck --error-exitcode 99 python3 -m pytest tests/test_calibrated.py \
    -k "store or hostile or shrunk" -q -p no:cacheprovider -W ignore -x >"$OUT/memcheck.log" 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|passed|failed|Invalid" "$OUT/memcheck.log" | tail -4 )
echo "t=$(( $(date +%s) - T0 )) s; waiting for training"
wait $TRAIN; tail -4 "$OUT/train.log"
echo "t=$(( $(date +%s) - T0 )) s"
( cd $M && ls -la && cp *.safetensors "$OUT"/ && tar cf "$OUT/model-meta.tar" --exclude='*.safetensors' . )
echo "== store A/B, one round"
( cd "$OUT" && mkdir -p ab ); 
for ref in 7eb9154 HEAD; do
  mkdir -p /tmp/site-$ref; [ -f /tmp/site-$ref/tq_core/__init__.py ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl
done
for round in 1 2; do for ref in 7eb9154 HEAD; do
  PYTHONPATH=/tmp/site-$ref timeout 70 python3 -m tq_core.cli bench --shapes poc --presets tq_k4v3,tq_k4v4,tq_k6v5,turboquant_k3v4_nc \
    --no-baselines --json "$OUT/ab/store-$ref-r$round.json" > "$OUT/ab/store-$ref-r$round.log" 2>&1
  echo "-- $ref r$round"; grep -E 'store' "$OUT/ab/store-$ref-r$round.log" | head -8
  [ $(( $(date +%s) - T0 )) -gt ${AB_UNTIL:-320} ] && break 2
done; done
echo "t=$(( $(date +%s) - T0 )) s"
echo "== tq eval"
PYTHONPATH=$S timeout 80 python3 -m tq_core.cli eval --model "$M" --device cuda --per-layer -q \
    --json "$OUT/eval-pydoc.json" > "$OUT/eval-pydoc.txt" 2>&1; echo rc=$?; grep -E '^(tq_|turbo|bf16|fp8|format)' "$OUT/eval-pydoc.txt" | head -14
PYTHONPATH=$S timeout 60 python3 -m tq_core.cli eval --model "$M" --device cuda -q --text .dev/texts/legal.txt \
    --formats tq_k4v3,tq_k4v4,tq_k6v5,turboquant_k3v4_nc,turboquant_4bit_nc,turboquant_k8v4 \
    --json "$OUT/eval-legal.json" > "$OUT/eval-legal.txt" 2>&1; echo rc=$?; grep -E '^(tq_|turbo|format)' "$OUT/eval-legal.txt" | head -10
PYTHONPATH=$S timeout 50 python3 -m tq_core.cli eval --model "$M" --device cuda --backend core -q \
    --formats tq_k4v3,tq_k4v4,tq_k6v5 --json "$OUT/eval-core.json" > "$OUT/eval-core.txt" 2>&1; echo rc=$?; grep -E '^(tq_|format)' "$OUT/eval-core.txt"
echo "total t=$(( $(date +%s) - T0 )) s"
cd "$OUT" && tar czf logs.tgz ab gpu-tests.log memcheck.log train.log eval-*.txt && rm -rf ab gpu-tests.log memcheck.log eval-*.txt
