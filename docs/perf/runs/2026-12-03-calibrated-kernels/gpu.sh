#!/usr/bin/env bash
# tq-triton's calibrated-format kernels on the H200, one device call from the repository
# root with .ab carried: .ab/base.whl holds main's tq-core and tq-triton wheels (the commit
# before the kernels), .ab/new.whl the working tree's. Runs tq-triton's GPU suite with the
# new wheels (TESTS, default the whole suite), then `tq bench` (default shapes, store rows, no per-token baselines) of every
# format with the new wheels and of vLLM's four with main's, interleaved, two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for ref in base new; do
    mkdir -p /tmp/site-$ref
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl
done
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
git log -1 --format='commit %H %cd' 2>/dev/null || true
date -u
echo "== GPU suite (new)"
( cd packages/tq-triton && PYTHONPATH=/tmp/site-new TQ_TEST_DEVICE=cuda timeout 300 python3 -m pytest ${TESTS:-tests} \
    -q -p no:cacheprovider -n 12 -W ignore >"$OUT/gpu-tests.log" 2>&1; tail -6 "$OUT/gpu-tests.log" )
ALL=turboquant_k8v4,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc,tq_k4v3,tq_k4v4,tq_k6v5
VLLM=turboquant_k8v4,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc
for round in 1 2; do
    for ref in new base; do
        presets=$ALL; [ $ref = base ] && presets=$VLLM
        echo "== bench $ref r$round"
        PYTHONPATH=/tmp/site-$ref timeout 240 python3 -W ignore -m tq_core.cli bench --no-baselines \
            --presets $presets --json "$OUT/bench-$ref-r$round.json" 2>&1 \
            | grep -E "tq_triton| bf16 |store|^gate|Traceback|Error" | grep -v "^Triton"
    done
done
