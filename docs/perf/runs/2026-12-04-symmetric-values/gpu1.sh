#!/usr/bin/env bash
# For the next session with an H200 (not run yet), from the repository root with .ab carried
# (wheels and tests of the working tree, as in runs/2026-12-04-token-rows-formats): the GPU
# tests of the symmetric values and of int_values and selector_pairs, which have never run on
# a GPU; the bench rows of tq_k4v4 with int_values off and on (every kernel the table picks);
# then token-rows configurations against the table and 4bit_nc / k3v4_nc in one run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
HERE=$PWD/docs/perf/runs/2026-12-04-symmetric-values
date -u
echo "== GPU tests: tq_k4v4 (store, every attention kernel), int_values, selector_pairs"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 300 python3 -m pytest tests/test_calibrated.py \
    tests/test_store.py tests/test_gluon_kernel.py tests/test_token_rows_kernel.py \
    -k "tq_k4v4 or int_values or selector_pairs or calibrated" -q -rf --tb=short -p no:cacheprovider -n 16 -W ignore \
    >"$OUT/gpu-tests.log" 2>&1; echo "rc=$?"; grep -E "FAILED|passed|failed" "$OUT/gpu-tests.log" | cut -c1-250 | tail -15 )
date -u
echo "== compute-sanitizer memcheck: tq_k4v4's hostile-metadata tests with int_values, each kernel"
# portable (the test sets TQ_GLUON=0 itself), Gluon, token rows (the tests set TQ_TOKEN_ROWS)
for t in "tests/test_calibrated.py -k int_values_hostile" "tests/test_gluon_kernel.py -k calibrated_hostile and tq_k4v4" \
    "tests/test_token_rows_kernel.py -k calibrated_hostile and tq_k4v4"; do
  file=${t%% -k *}; sel=${t#* -k }
  ( cd .ab/src/packages/tq-triton && TQ_INT_VALUES=1 TQ_TEST_DEVICE=cuda timeout 200 \
      /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 5 python3 -m pytest "$file" -k "$sel" \
      -q -p no:cacheprovider -x -W ignore >"$OUT/memcheck.log" 2>&1
    echo "memcheck $t: $(grep -E 'passed|failed' "$OUT/memcheck.log" | tail -1) $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)" )
done
date -u
echo "== the bench rows of tq_k4v4 (every kernel) with int_values 0 and 1, beside 4bit_nc and bf16, the store included"
for iv in 0 1; do
  TQ_INT_VALUES=$iv PYTHONUNBUFFERED=1 timeout 200 python3 -W ignore -m tq_core.cli bench --presets tq_k4v4,turboquant_4bit_nc --no-baselines \
      --json "$OUT/bench-int$iv.json" > "$OUT/bench-int$iv.log" 2>&1; echo "rc=$?"; grep -E "tq_k4v4|4bit_nc|bf16" "$OUT/bench-int$iv.log" | head -30
  # head_dim 256, which no named shape has: decode and q_len 4 (the token-rows kernel takes
  # head_dim 128 only, so the Gluon and portable kernels)
  for q in 1 4; do
    TQ_INT_VALUES=$iv PYTHONUNBUFFERED=1 timeout 120 python3 -W ignore -m tq_core.cli bench --shapes custom --head-dim 256 \
        --q-len $q --seq-len 32768 --presets tq_k4v4,turboquant_4bit_nc --no-baselines --no-store 2>&1 | grep -E "tq_k4v4|4bit_nc|bf16"
  done
done
date -u
echo "== A/B: decode-32k and q_len 2 (token rows), int_values and selector_pairs against the table"
( cd "$OUT" && timeout 240 python3 "$HERE/time_tr.py" decode-32k,verify-32k-q2 tq_k4v4,turboquant_4bit_nc \
    32:0:64:0:0:0 32:0:64:0:0:1 16:0:64:0:0:1 64:0:64:0:0:1 32:16:0:0:0:1 16:0:64:1:0:0 )
( cd "$OUT" && mv time_tr.json time_tr_k4v4.json && timeout 240 python3 "$HERE/time_tr.py" decode-32k,verify-32k-q2,verify-32k-q4 \
    turboquant_k3v4_nc,turboquant_3bit_nc 64:0:32:1:0 64:0:32:1:1 16:0:64:1:1 32:16:0:1:1 )
date -u
