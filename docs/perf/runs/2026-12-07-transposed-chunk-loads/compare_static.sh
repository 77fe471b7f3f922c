#!/bin/bash
# preset block_kv warps block_q group
for cfg in "turboquant_k3v4_nc 32 2 4 4" "turboquant_k3v4_nc 64 4 4 4" "turboquant_3bit_nc 32 2 4 4" "tq_k4v3 32 2 4 4" "turboquant_k3v4_nc 32 1 2 8"; do
  set -- $cfg
  for tree in /tmp/tqmain /work/main; do
    r=$(cd /work/main && TRITON_DEFAULT_FP_FUSION=1 PYTHONPATH=/tmp/t36:$tree/packages/tq-core/src:$tree/packages/tq-triton/src timeout 600 /tmp/v39/bin/python docs/perf/scripts/static_loop.py --preset $1 --block-kv $2 --warps $3 --block-q $4 --group $5 --top 300 2>&1)
    echo "$cfg $(basename $tree): $(echo "$r" | grep -oE 'registers [0-9]+, stack [0-9]+' ) $(echo "$r" | grep -oE '[0-9.]+ per token') STS.U16=$(echo "$r" | grep -oE 'STS.U16 [0-9]+' | awk '{s+=$2} END {print s+0}')"
  done
done
