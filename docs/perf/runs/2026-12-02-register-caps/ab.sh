#!/usr/bin/env bash
# The head_dim-keyed H200 entries (register caps from caps.sh) against main (4f3d6fd,
# .ab/main.whl): the rows they change, plus head_dim 64 with 8 q heads per kv head (32-row
# tiles at q_len 4: an entry keyed by head_dim applies there too), one `tq bench` per shape
# and tree, trees interleaved. .ab/new.whl: wheels of the working tree.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for ref in main new; do
    mkdir -p /tmp/site-$ref
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-$ref .ab/$ref.whl/*.whl
done
P=--presets=turboquant_k8v4,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc
run() {  # name, then tq bench arguments
    local name=$1; shift
    for ref in main new; do
        echo "== $name $ref"
        PYTHONPATH=/tmp/site-$ref python3 -W ignore -m tq_core.cli bench --no-store --no-baselines $P "$@" 2>&1 \
            | grep tq_triton
    done
}
run hd64-q1 --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 1
run hd64-q4 --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 4
run hd64-q4-g8 --shapes custom --batch 32 --q-heads 24 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 4
run hd256-q1 --shapes custom --batch 8 --q-heads 16 --kv-heads 4 --head-dim 256 --seq-len 16384 --q-len 1
