#!/usr/bin/env bash
# The q2:d128 / q4:d128 entries against main: `tq bench` of verify-32k's geometry (8 requests,
# 32 q / 8 kv heads, head_dim 128, 32768 tokens) at q_len 2, 3 and 4 with the fastest bf16
# kernel, and decode-32k and verify-32k (q_len 8, rows the entries must not change), every
# preset; main's wheels (.ab/base.whl) and the working tree's (.ab/new.whl, main's tq-core
# wheel and a wheel of packages/tq-triton), two rounds, trees interleaved. Then
# crosscheck.py and the attention and table tests with the new wheels.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$PWD/docs/perf/runs/2026-12-03-verify-buckets
for ref in base new; do
    mkdir -p /tmp/site-$ref
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl
done
P=--presets=turboquant_k8v4,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc
V=(--shapes custom --batch 8 --q-heads 32 --kv-heads 8 --head-dim 128 --seq-len 32768)
bench() {  # name, then tq bench arguments
    local name=$1; shift
    for ref in base new; do
        echo "== $name $ref r$round"
        PYTHONPATH=/tmp/site-$ref python3 -W ignore -m tq_core.cli bench --no-store --no-baselines $P "$@" 2>&1 \
            | grep -E "tq_triton| bf16 |^gate|Traceback|Error"
    done
}
for round in 1 2; do
    for q in 2 3 4; do
        bench "q_len $q" "${V[@]}" --q-len $q
    done
    bench "decode-32k,verify-32k" --shapes decode-32k,verify-32k
done
echo "== crosscheck (new)"
PYTHONPATH=/tmp/site-new timeout 120 python3 -W ignore "$here/crosscheck.py"
echo "== GPU tests (new): test_attention.py test_api.py test_gluon_kernel.py"
cd packages/tq-triton && PYTHONPATH=/tmp/site-new TQ_TEST_DEVICE=cuda timeout 150 python3 -m pytest \
    tests/test_attention.py tests/test_api.py tests/test_gluon_kernel.py -q -p no:cacheprovider -n 8 2>&1 | tail -5
