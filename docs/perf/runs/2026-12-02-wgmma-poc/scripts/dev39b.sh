#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u
NCU=/usr/local/cuda/bin/ncu
for c in "attn turboquant_k3v4_nc decode-32k" "attn turboquant_k8v4 decode-32k" "attn turboquant_k3v4_nc verify-32k" "attn turboquant_k8v4 verify-32k" "attn turboquant_k3v4_nc poc"; do
  set -- $c; n=${2#turboquant_}_${3:-store}
  timeout 100 $NCU --kernel-name regex:"attention_kernel" --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis -f -o $OUT/$n python3 .ab/ncu39.py $c > /tmp/$n.log 2>&1; echo "== $n rc $?"
  $NCU -i $OUT/$n.ncu-rep --page details > $OUT/$n.details.txt 2>&1
  grep -E "^  [a-z_]+kernel|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|No Eligible|Eligible Warps|DRAM Throughput|Issued Warp|Executed Ipc A|Block Limit Reg|Compute \(SM\) Th|Local Memory Sp" $OUT/$n.details.txt | head -16
  rm -f $OUT/$n.ncu-rep
done
date -u
