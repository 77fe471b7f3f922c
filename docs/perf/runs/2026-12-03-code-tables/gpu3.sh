#!/usr/bin/env bash
# Call 3 of this run, from the repository root with .ab carried (.ab/new.whl: the commit's
# wheels): the shapes the default bench does not run, for all seven formats beside the
# fastest bf16 kernel, one `tq bench --shapes custom` process per shape: decode at head_dim
# 64 (32 requests of 8 K tokens, 9 q / 3 kv heads: SmolLM2's geometry), and verify-32k's
# geometry (8 requests of 32 K tokens, 32 q / 8 kv heads, head_dim 128) at q_len 2, 4 and 16.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
ALL=turboquant_k8v4,turboquant_4bit_nc,turboquant_k3v4_nc,turboquant_3bit_nc,tq_k4v3,tq_k4v4,tq_k6v5
run() {
    local name=$1; shift
    echo "== $name"
    timeout 150 python3 -W ignore -m tq_core.cli bench --no-baselines --no-store --presets $ALL --shapes custom "$@" \
        --json "$OUT/bench-$name.json" 2>&1 | grep -E "tq_triton| bf16 |^gate|Traceback|Error" | grep -v "^Triton"
}
run decode-d64 --batch 32 --q-heads 9 --kv-heads 3 --head-dim 64 --seq-len 8192 --q-len 1
for q in 2 4 16; do
    run verify-32k-q$q --batch 8 --q-heads 32 --kv-heads 8 --head-dim 128 --seq-len 32768 --q-len $q
done
date -u
