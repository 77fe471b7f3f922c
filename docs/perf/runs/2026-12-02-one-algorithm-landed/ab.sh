#!/usr/bin/env bash
# Device call 1 for the landed one-algorithm change: `tq bench` of 2ce88d1 (issue 29's
# reference table) against main's wheels (.ab/main.whl, from `ab_refs.sh prep main`): the
# gate presets over every bench shape and the store, two interleaved rounds; then the other
# two formats at decode-32k and verify-32k, and the untuned shapes (every format, q_len 1,
# 2, 4, 16, head_dim 64/128/256), one run per ref, refs interleaved. Run from the
# repository root with .ab carried; OUT is where logs go.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
AB_SHAPES=decode-32k,verify-32k,poc,ragged AB_STORE=1 bash docs/perf/scripts/ab_refs.sh run "$OUT/ab" 2ce88d1 main
for ref in 2ce88d1 main; do
    mkdir -p "/tmp/site-$ref"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "/tmp/site-$ref" .ab/$ref.whl/*.whl
done
P=--presets=turboquant_k8v4,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc
run() {  # name, then tq bench arguments
    local name=$1; shift
    for ref in 2ce88d1 main; do
        echo "== $name $ref"
        PYTHONPATH=/tmp/site-$ref python3 -W ignore -m tq_core.cli bench --no-store --no-baselines "$@" 2>&1 \
            | tee "$OUT/$name-$ref.log" | grep tq_triton
    done
}
run other --shapes decode-32k,verify-32k --presets turboquant_4bit_nc,turboquant_3bit_nc
for q in 2 4 16; do
    run "hd128-q$q" $P --shapes custom --batch 8 --q-heads 32 --kv-heads 8 --head-dim 128 --seq-len 32768 --q-len $q
done
run hd64-q1 $P --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 1
run hd64-q4 $P --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 4
run hd256-q1 $P --shapes custom --batch 8 --q-heads 16 --kv-heads 4 --head-dim 256 --seq-len 16384 --q-len 1
run hd256-q4 $P --shapes custom --batch 8 --q-heads 16 --kv-heads 4 --head-dim 256 --seq-len 16384 --q-len 4
