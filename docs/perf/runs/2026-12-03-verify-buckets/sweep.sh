#!/usr/bin/env bash
# tq sweep of the q2 and q4 buckets (verify-32k's geometry at q_len 2 and 4) for the four
# presets, with the working tree's tq-triton (.ab/new.whl: main's tq-core wheel and a wheel
# of packages/tq-triton; `tq sweep` is found through the wheels' entry points). Compiles
# first: one sweep per preset and bucket in parallel fills Triton's cache and its times are
# discarded; then the sweeps that count run one at a time, and summary.py prints each
# bucket's fastest configurations against the configuration the table gives it now.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=docs/perf/runs/2026-12-03-verify-buckets
site=/tmp/site-new; mkdir -p $site
python3 -m pip install -q --no-index --no-deps --no-compile --target $site .ab/new.whl/*.whl
export PYTHONPATH=$site PYTHONUNBUFFERED=1
COMMON=(--block-kv 32,64 --warps 2,4 --modes prefetch:1 --splits 0,16,32 --waves 4,16 --no-store)
declare -A GRID=(
    [turboquant_k3v4_nc]="--gluon 0,1"
    [turboquant_k8v4]="--gluon 0,1 --max-registers 0,168"
    [turboquant_4bit_nc]="--max-registers 0,168"
    [turboquant_3bit_nc]="--max-registers 0,168"
)
PRESETS=(turboquant_k3v4_nc turboquant_k8v4 turboquant_4bit_nc turboquant_3bit_nc)
BUCKETS=${BUCKETS:-q2,q4}
sweep() {  # preset, buckets, table path
    # shellcheck disable=SC2086
    python3 -W ignore -m tq_core.cli sweep --presets "$1" --buckets "$2" "${COMMON[@]}" ${GRID[$1]} --out "$3"
}
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
t0=$(date +%s)
for p in "${PRESETS[@]}"; do
    for b in ${BUCKETS//,/ }; do
        timeout 300 bash -c "$(declare -p COMMON GRID); $(declare -f sweep); sweep $p $b /tmp/warm-$p-$b.json" \
            >"/tmp/warm-$p-$b.log" 2>&1 &
    done
done
wait
echo "compile pass: $(($(date +%s) - t0)) s"
for p in "${PRESETS[@]}"; do
    t=$(date +%s)
    sweep "$p" "$BUCKETS" "$OUT/sweep-$p.json" >"/tmp/sweep-$p.log" 2>&1 || tail -5 "/tmp/sweep-$p.log"
    echo "$p: $(($(date +%s) - t)) s"
done
python3 "$here/summary.py" "$OUT"/sweep-*.json
