#!/usr/bin/env bash
# Device call 2 for the landed one-algorithm change: tq-triton's GPU suite with main's
# wheels installed (.ab/main.whl: the entry points the CLI and registry tests need), the
# two kernels against each other, and compute-sanitizer memcheck of the memory-safety
# tests with the Gluon kernel forced on and off. Run from the repository root with .ab
# carried; OUT is where the logs go.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
site=/tmp/site-main; mkdir -p $site
python3 -m pip install -q --no-index --no-deps --no-compile --target $site .ab/main.whl/*.whl
export PYTHONPATH=$site TQ_TEST_DEVICE=cuda PATH=$site/bin:$PATH
python3 -c "import torch, triton, tq_triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), tq_triton.__file__)"
python3 -m pytest packages/tq-triton/tests -q -p no:cacheprovider -n 8 -W ignore >"$OUT/gpu-tests.log" 2>&1
tail -6 "$OUT/gpu-tests.log"
python3 -m pytest packages/tq-triton/tests/test_gluon_kernel.py -q -p no:cacheprovider -k both_kernels -s -W ignore \
    >"$OUT/cross-kernel.log" 2>&1
grep -E "cross-kernel|passed|failed" "$OUT/cross-kernel.log" | tail -20
for g in 0 1; do
    TQ_GLUON=$g timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 \
        python3 -m pytest packages/tq-triton/tests/test_memory_safety.py -q -p no:cacheprovider -x -W ignore \
        >"$OUT/memcheck-gluon$g.log" 2>&1
    echo "memcheck TQ_GLUON=$g: $(grep -E 'passed|failed' "$OUT/memcheck-gluon$g.log" | tail -1) $(grep 'ERROR SUMMARY' "$OUT/memcheck-gluon$g.log" | tail -1)"
done
