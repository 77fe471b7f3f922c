#!/usr/bin/env bash
# Device call 1 of the one-algorithm change: the tq-triton GPU suite of the working tree
# (the cross-kernel test included), then compute-sanitizer memcheck of the memory-safety
# tests with the Gluon kernel forced on and off. Run from the repository root on the GPU
# machine; OUT is where the logs go.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=packages/tq-core/src:packages/tq-triton/src TQ_TEST_DEVICE=cuda
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -m pytest packages/tq-triton/tests -q -p no:cacheprovider -n 8 -W ignore >"$OUT/gpu-tests.log" 2>&1
tail -15 "$OUT/gpu-tests.log"
python3 -m pytest packages/tq-triton/tests/test_gluon_kernel.py -q -p no:cacheprovider -k both_kernels -s -W ignore \
    >"$OUT/cross-kernel.log" 2>&1
grep -E "cross-kernel|passed|failed" "$OUT/cross-kernel.log" | tail -40
for g in 0 1; do
    TQ_GLUON=$g timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 \
        python3 -m pytest packages/tq-triton/tests/test_memory_safety.py -q -p no:cacheprovider -x -W ignore \
        >"$OUT/memcheck-gluon$g.log" 2>&1
    echo "memcheck TQ_GLUON=$g: $(grep -E 'passed|failed' "$OUT/memcheck-gluon$g.log" | tail -1) $(grep 'ERROR SUMMARY' "$OUT/memcheck-gluon$g.log" | tail -1)"
done
