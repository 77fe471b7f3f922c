#!/usr/bin/env bash
# Device call 2 of the one-algorithm change: `tq bench` of 2ce88d1 (issue 29's reference
# table) against the working tree's wheels (.ab/new.whl): the gate presets over every bench
# shape and the store, two interleaved rounds; then one run each of the other two formats
# at decode-32k and verify-32k; then the CLI and registry tests with the wheels installed
# (entry points). Run from the repository root with .ab carried; OUT is where logs go.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
AB_SHAPES=decode-32k,verify-32k,poc,ragged AB_STORE=1 bash docs/perf/scripts/ab_refs.sh run "$OUT/ab" 2ce88d1 new
for ref in 2ce88d1 new; do
    mkdir -p "/tmp/site-$ref"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "/tmp/site-$ref" .ab/$ref.whl/*.whl
done
for ref in 2ce88d1 new; do
    echo "== other formats, $ref"
    PYTHONPATH=/tmp/site-$ref python3 -W ignore -m tq_core.cli bench --shapes decode-32k,verify-32k \
        --presets turboquant_4bit_nc,turboquant_3bit_nc --no-baselines --no-store 2>&1 | tee "$OUT/other-$ref.log" | grep tq_triton
done
PYTHONPATH=/tmp/site-new TQ_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -W ignore \
    packages/tq-triton/tests/test_cli_gpu_commands.py packages/tq-triton/tests/test_api.py \
    "packages/tq-triton/tests/test_gluon_kernel.py::test_both_kernels_agree_more_closely_than_with_tq_core" \
    >"$OUT/tests-installed.log" 2>&1
tail -3 "$OUT/tests-installed.log"
