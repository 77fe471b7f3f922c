#!/usr/bin/env bash
# Call 2, from the repository root with .ab carried (.ab/new.whl: the wheels of main): sweeps
# of the head_dim-64 decode bucket (q1:d64; k8v4 runs the portable kernel there today), the
# calibrated formats' decode (q1) and verify (q8) buckets after folding, and the store
# candidates of the calibrated formats (register caps, tiles), then one tq bench row set of
# the shapes those touch. Sweeps write tables under $OUT and change nothing installed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
export TQ_TUNING_DIR=/tmp/no-user-tables
date -u
sweep() {  # name timeout args...
  local name=$1 t=$2; shift 2
  echo "== sweep $name"
  PYTHONUNBUFFERED=1 timeout $t python3 -W ignore -m tq_core.cli sweep --no-store --modes prefetch:1 "$@" \
      --out "$OUT/sweep-$name.json" 2>&1 | grep -v "^Triton" | grep -E "^  |wrote" | tail -6
  date -u
}
sweep d64-k8v4 80 --presets turboquant_k8v4 --buckets q1:d64 --gluon 0,1 --block-kv 32,64 --warps 1,2 --splits 0 --waves 16,64
sweep d64 120 --presets turboquant_k3v4_nc,turboquant_4bit_nc,tq_k4v3,tq_k4v4 --buckets q1:d64 --gluon 1 --block-kv 32,64 --warps 1,2 --splits 0 --waves 16,64
sweep cal-q1 80 --presets tq_k4v3,tq_k4v4 --buckets q1 --gluon 1 --block-kv 32,64 --warps 1,2 --splits 0 --waves 16,64
sweep cal-q8 50 --presets tq_k4v3,tq_k4v4 --buckets q8 --gluon 1 --block-kv 32,64 --warps 4 --splits 16 --split-budget 4 --skip-empty 1
echo "== store candidates"
PYTHONUNBUFFERED=1 timeout ${T3:-130} python3 -W ignore docs/perf/runs/2026-12-04-after-folding/store_cands.py \
    --presets tq_k4v3,tq_k4v4,tq_k6v5,turboquant_k3v4_nc --json "$OUT/store-cands.json" 2>&1 | grep -v "^Triton" | grep -v '^{' 
date -u
echo "== ncu: the store of k3v4_nc and tq_k4v3 (table configuration)"
for p in turboquant_k3v4_nc tq_k4v3; do
  timeout ${T4:-50} /usr/local/cuda/bin/ncu --kernel-name regex:_store_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    python3 docs/perf/runs/2026-12-04-after-folding/store_once.py $p > "$OUT/ncu-store-$p.txt" 2>&1
  grep -E "Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit Reg|Issue Slots Busy|No Eligible|Memory Throughput|DRAM Throughput|Duration|Compute \(SM\)|Stall|Warp Cycles Per Issued" "$OUT/ncu-store-$p.txt" | head -20
done
date -u
