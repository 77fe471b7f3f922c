#!/usr/bin/env bash
# On the GPU machine, from the repository root of main at 99038b9, with 61be173's packages in
# .dev/pairs (git archive 61be173 packages | tar -x -C .dev/pairs) carried along: the portable
# kernel alone, main's register table and gathering against the pair table, in alternating
# processes; $OUT receives the logs (JSON rows).
set -u
here=docs/perf/runs/2026-12-06-pair-table
export TRITON_CACHE_DIR=$PWD/.tcache TQ_GLUON=0
M=$PWD/packages/tq-core/src:$PWD/packages/tq-triton/src
Pp=$PWD/.dev/pairs/packages/tq-core/src:$PWD/.dev/pairs/packages/tq-triton/src
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
( PYTHONPATH=$M timeout 200 python3 $here/pairs_ab.py --tree main --out /dev/null --prewarm 7 ) &
( PYTHONPATH=$Pp timeout 200 python3 $here/pairs_ab.py --tree pairs --out /dev/null --prewarm 7 --variants table ) &
wait
PYTHONPATH=$M timeout 230 python3 $here/pairs_ab.py --tree main --out "$OUT/main1.json" --bf16 >"$OUT/main1.log" 2>&1
PYTHONPATH=$Pp timeout 100 python3 $here/pairs_ab.py --tree pairs --variants table --out "$OUT/pairs1.json" >"$OUT/pairs1.log" 2>&1
PYTHONPATH=$M timeout 80 python3 $here/pairs_ab.py --tree main --variants table --out "$OUT/main2.json" >"$OUT/main2.log" 2>&1
PYTHONPATH=$Pp timeout 80 python3 $here/pairs_ab.py --tree pairs --variants table --out "$OUT/pairs2.json" >"$OUT/pairs2.log" 2>&1
