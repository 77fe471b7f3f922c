#!/bin/bash
# Calibration robustness with folded norms (SmolLM2, CPU): tq calibrate on five texts, then
# tq eval of the three calibrated formats with each file on the default windows. Run from
# the repository root with the eval environment (nox -s eval creates .nox/eval); writes
# into $W (default /tmp/robust).
set -e
W=${W:-/tmp/robust}; mkdir -p "$W"
PY=${PY:-.nox/eval/bin/python}
HERE=docs/accuracy-runs/2026-12-04-folded-norm/robustness
$PY $HERE/make_texts.py "$W"
run() {  # name, calibrate args...
  name=$1; shift
  /usr/bin/time -f "$name calibrate %e s" $PY -m tq_core.cli calibrate -q --out "$W/cal_$name.pt" "$@" 2>>"$W/times.txt"
  $PY -m tq_core.cli eval -q --formats tq_k4v3,tq_k4v4,tq_k6v5 --calibration "$W/cal_$name.pt" \
      --json "$W/$name.json" > "$W/$name.txt"
  echo "== $name"; grep -E "^tq_" "$W/$name.txt"
}
run docs4 --windows 4
run docs1 --windows 1
run source16 --text "$W/stdlib-source.py.txt"
run insample16 --text "$W/pydoc-topics.txt"
