#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
NCU=/usr/local/cuda/bin/ncu
$NCU --version | tail -1
for c in "turboquant_k8v4 poc 1 64 16" "turboquant_k3v4_nc verify-32k 1 64 16" "turboquant_k8v4 verify-32k 1 32 16"; do
  set -- $c; n=${1#turboquant_}_$2
  timeout 150 $NCU --kernel-name regex:gluon_attention --launch-skip 2 --launch-count 1 --set full --import-source yes -f -o $OUT/$n python3 .ab/ncu_drv.py $c > $OUT/$n.log 2>&1; echo "$n rc $?"
  $NCU -i $OUT/$n.ncu-rep --page details > $OUT/$n.details.txt 2>&1
  $NCU -i $OUT/$n.ncu-rep --page source --csv --print-source sass > $OUT/$n.sass.csv 2>&1
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|No Eligible|Eligible Warps|DRAM Throughput|Issued Warp|Executed Ipc A|Block Limit" $OUT/$n.details.txt | head -14
  ls -la $OUT/$n.sass.csv | awk '{print $5}'
done
