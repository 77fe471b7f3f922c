#!/usr/bin/env bash
# Register tables for 4-bit codes and calibrated values, and the store's binary search for
# every code width, on the H200: one device call from the repository root with .ab carried
# (.ab/base.whl: main's tq-core and tq-triton wheels; .ab/new.whl: the working tree's).
# 1. tq-triton's GPU tests of the changed code with the new wheels (TESTS, default below);
# 2. `tq bench` (default shapes, store rows, no per-token baselines), in one process per run:
#    new (tables and search on, the H200 table's default), new with TQ_KEY_LUT=0 and
#    TQ_CODE_SEARCH=0 (gathered centroids, counted codes: the code paths before the change),
#    and main's wheels; ROUNDS rounds, interleaved.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for ref in base new; do
    mkdir -p /tmp/site-$ref
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl
done
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
TESTS=${TESTS:-"tests/test_key_lut.py tests/test_store.py tests/test_calibrated.py tests/test_cuda_graph.py"}
if [ "$TESTS" != none ]; then
    echo "== GPU tests (new): $TESTS"
    ( cd packages/tq-triton && PYTHONPATH=/tmp/site-new TQ_TEST_DEVICE=cuda timeout ${TEST_TIMEOUT:-240} python3 -m pytest $TESTS \
        -q -p no:cacheprovider -n 12 -W ignore >"$OUT/gpu-tests.log" 2>&1; tail -8 "$OUT/gpu-tests.log" )
fi
PRESETS=${PRESETS:-turboquant_4bit_nc,turboquant_k3v4_nc,tq_k4v3,tq_k4v4,tq_k6v5}
BASE_PRESETS=${BASE_PRESETS:-turboquant_4bit_nc,turboquant_k3v4_nc,tq_k4v3,tq_k4v4,tq_k6v5}
BENCH_ARGS=${BENCH_ARGS:-}
for round in $(seq 1 ${ROUNDS:-1}); do
    for run in new gather base; do
        site=new; env=(); presets=$PRESETS
        [ $run = gather ] && env=(TQ_KEY_LUT=0 TQ_CODE_SEARCH=0)
        [ $run = base ] && { site=base; presets=$BASE_PRESETS; }
        echo "== bench $run r$round"
        env "${env[@]}" PYTHONPATH=/tmp/site-$site timeout 300 python3 -W ignore -m tq_core.cli bench --no-baselines \
            --presets $presets $BENCH_ARGS --json "$OUT/bench-$run-r$round.json" 2>&1 \
            | grep -E "tq_triton| bf16 |store|^gate|Traceback|Error" | grep -v "^Triton"
    done
done
date -u
