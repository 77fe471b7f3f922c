#!/usr/bin/env bash
# Call 2 of this run, from the repository root with .ab carried (.ab/new.whl: the wheels of
# the commit under test): tq-triton's whole GPU suite; compute-sanitizer memcheck of the
# memory-safety tests and the calibrated formats' hostile-input tests; then `tq bench` of the
# calibrated formats with the shipped table (their `default` entries) and with a candidate
# user table that gives each of them 4bit_nc's attention entries, ROUNDS rounds, interleaved.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
if [ "${SUITE:-1}" = 1 ]; then
    echo "== GPU suite"
    ( cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-300} python3 -m pytest tests \
        -q -p no:cacheprovider -n 12 -W ignore >"$OUT/gpu-suite.log" 2>&1; tail -8 "$OUT/gpu-suite.log" )
    date -u
fi
if [ "${SANITIZE:-1}" = 1 ]; then
    echo "== compute-sanitizer memcheck"
    ( cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SANITIZE_TIMEOUT:-150} /usr/local/cuda/bin/compute-sanitizer \
        --tool memcheck --error-exitcode 99 python3 -m pytest tests/test_memory_safety.py tests/test_calibrated.py \
        -k "not test_calibrated or hostile or skips" -q -p no:cacheprovider -W ignore >"$OUT/memcheck.log" 2>&1
      echo "rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -4 )
    date -u
fi
# the candidate: the shipped H200 table with 4bit_nc's attention entries for each calibrated format
mkdir -p /tmp/cand
python3 - <<'PY'
import json, pathlib, tq_triton
src = pathlib.Path(tq_triton.__file__).parent / "tuning_tables" / "nvidia_h200.json"
t = json.loads(src.read_text())
for name in ("tq_k4v3", "tq_k4v4", "tq_k6v5"):
    t["attention"][name] = t["attention"]["turboquant_4bit_nc"]
pathlib.Path("/tmp/cand/h200.json").write_text(json.dumps(t, indent=1))
PY
cp /tmp/cand/h200.json "$OUT/candidate-table.json"
for round in $(seq 1 ${ROUNDS:-1}); do
    for run in default candidate; do
        env=(); [ $run = candidate ] && env=(TQ_TUNING_DIR=/tmp/cand)
        echo "== bench $run r$round"
        env "${env[@]}" timeout 200 python3 -W ignore -m tq_core.cli bench --no-baselines --no-store \
            --presets tq_k4v3,tq_k4v4,tq_k6v5 --json "$OUT/bench-$run-r$round.json" 2>&1 \
            | grep -E "tq_triton| bf16 |^gate|Traceback|Error" | grep -v "^Triton"
    done
done
date -u
