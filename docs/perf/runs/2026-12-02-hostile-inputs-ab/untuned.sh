#!/usr/bin/env bash
# The untuned shapes of the hostile-input A/B: 2ce88d1 against main, every format, one
# `tq bench` per shape and ref, refs interleaved. Needs .ab from ab_refs.sh prep.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for ref in 2ce88d1 HEAD; do
    mkdir -p /tmp/site-$ref
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl
done
P=--presets=turboquant_k8v4,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc
run() {  # name, then tq bench arguments
    local name=$1; shift
    for ref in 2ce88d1 HEAD; do
        echo "== $name $ref"
        PYTHONPATH=/tmp/site-$ref python3 -W ignore -m tq_core.cli bench --no-store --no-baselines $P "$@" 2>&1 \
            | grep tq_triton
    done
}
run ragged --shapes ragged
for q in 1 2 4 16; do
    run "hd128-q$q" --shapes custom --batch 8 --q-heads 32 --kv-heads 8 --head-dim 128 --seq-len 32768 --q-len $q
done
run hd64-q1 --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 1
run hd64-q4 --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 4
run hd256-q1 --shapes custom --batch 8 --q-heads 16 --kv-heads 4 --head-dim 256 --seq-len 16384 --q-len 1
run hd256-q4 --shapes custom --batch 8 --q-heads 16 --kv-heads 4 --head-dim 256 --seq-len 16384 --q-len 4
