#!/bin/bash
# tq_k4v4 with symmetric values (SmolLM2, CPU): tq eval of every format (the default run,
# with its plot), then the calibration-robustness runs for tq_k4v4 with the texts of
# ../2026-12-04-folded-norm/robustness. Run from the repository root with the eval
# environment (nox -s eval creates .nox/eval; PY= another Python that has it); writes into
# $W (default /tmp/symmetric).
set -e
W=${W:-/tmp/symmetric}; mkdir -p "$W"
PY=${PY:-.nox/eval/bin/python}
$PY -m tq_core.cli eval -q --per-layer --json "$W/default.json" --plot "$W/quality-vs-bytes.png" > "$W/default.txt"
grep -E "^(tq_|turboquant|fp8|bf16)" "$W/default.txt"
$PY docs/accuracy-runs/2026-12-04-folded-norm/robustness/make_texts.py "$W"
run() {  # name, calibrate args...
  name=$1; shift
  /usr/bin/time -f "$name calibrate %e s" $PY -m tq_core.cli calibrate -q --out "$W/cal_$name.pt" "$@" 2>>"$W/times.txt"
  $PY -m tq_core.cli eval -q --formats tq_k4v4 --calibration "$W/cal_$name.pt" --json "$W/$name.json" > "$W/$name.txt"
  echo "== $name"; grep -E "^tq_" "$W/$name.txt"
}
run docs4 --windows 4
run docs1 --windows 1
run source16 --text "$W/stdlib-source.py.txt"
run insample16 --text "$W/pydoc-topics.txt"
