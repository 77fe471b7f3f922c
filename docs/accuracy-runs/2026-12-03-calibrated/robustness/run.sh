#!/bin/bash
set -e
export TQ_CACHE_DIR=/work/main/.nox/tq-cache
cd /tmp/p30/robust
run() {  # name, calibrate args...
  name=$1; shift
  /usr/bin/time -f "$name calibrate %e s" python -m tq_core.cli calibrate -q --out cal_$name.pt "$@" 2>>times.txt | tee -a calibrate.txt
  python -m tq_core.cli eval -q --formats tq_k4v3,tq_k4v4 --calibration cal_$name.pt --json $name.json > $name.txt
  echo "== $name"; grep -E "^tq_" $name.txt
}
run docs16                          # the default: 16 windows of 512 tokens of stdlib docstrings
run docs1 --windows 1
run docs4 --windows 4
run source16 --text stdlib-source.py.txt
run insample16 --text pydoc-topics.txt
