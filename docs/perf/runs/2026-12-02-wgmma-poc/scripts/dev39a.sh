#!/usr/bin/env bash
# call 4 as it ran: the kernel-name regex also matched the store launches that build the
# attention cases' caches, so only the store profile (the last case) is kept; then the GPU
# tests with the new table and a second bench (bench-repeat.*)
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
date -u
NCU=/usr/local/cuda/bin/ncu
for c in "attn turboquant_k3v4_nc decode-32k" "attn turboquant_k8v4 decode-32k" "attn turboquant_k3v4_nc verify-32k" "attn turboquant_k8v4 verify-32k" "attn turboquant_k3v4_nc poc" "store turboquant_k3v4_nc"; do
  set -- $c; n=${2#turboquant_}_${3:-store}
  timeout 100 $NCU --kernel-name regex:"attention_kernel|_store_kernel" --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis -f -o $OUT/$n python3 .ab/ncu39.py $c > $OUT/$n.log 2>&1; echo "== $n rc $?"
  $NCU -i $OUT/$n.ncu-rep --page details > $OUT/$n.details.txt 2>&1
  grep -E "^  [a-z_]+kernel|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|No Eligible|Eligible Warps|DRAM Throughput|Issued Warp|Executed Ipc A|Block Limit Reg|Compute \(SM\) Th|Local Memory Sp" $OUT/$n.details.txt | head -16
  rm -f $OUT/$n.ncu-rep
done
date -u
(cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 150 python3 -m pytest tests/test_attention.py tests/test_attention_numerics.py tests/test_api.py -q -n 8 -p no:cacheprovider 2>&1 | grep -E "FAILED|ERROR|passed|failed" | tail -20 | tee $OUT/gpu-tests.txt)
timeout 150 python3 -m tq_core.cli bench --json $OUT/bench2.json 2>&1 | grep -E "tq_triton|lower bound|sdpa|flash" | tee $OUT/bench2.txt
date -u
