#!/usr/bin/env bash
# Register caps (TQ_MAX_REGISTERS) on the portable kernel's untuned rows that main
# (4f3d6fd) runs slower than 2ce88d1 (runs/2026-12-02-one-algorithm-landed): one `tq bench`
# per shape and cap, caps interleaved. Needs .ab/main.whl (ab_refs.sh prep main).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
site=/tmp/site-main; mkdir -p $site
python3 -m pip install -q --no-index --no-deps --no-compile --target $site .ab/main.whl/*.whl
P=--presets=turboquant_k8v4,turboquant_4bit_nc,turboquant_3bit_nc
run() {  # name, then tq bench arguments
    local name=$1; shift
    for cap in 0 168; do
        echo "== $name cap $cap"
        TQ_MAX_REGISTERS=$cap PYTHONPATH=$site python3 -W ignore -m tq_core.cli bench --no-store --no-baselines $P "$@" 2>&1 \
            | grep tq_triton
    done
}
run verify-32k --shapes verify-32k
for q in 2 16; do
    run "hd128-q$q" --shapes custom --batch 8 --q-heads 32 --kv-heads 8 --head-dim 128 --seq-len 32768 --q-len $q
done
run hd64-q1 --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 1
run hd64-q4 --shapes custom --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 4
run hd256-q1 --shapes custom --batch 8 --q-heads 16 --kv-heads 4 --head-dim 256 --seq-len 16384 --q-len 1
run hd256-q4 --shapes custom --batch 8 --q-heads 16 --kv-heads 4 --head-dim 256 --seq-len 16384 --q-len 4
