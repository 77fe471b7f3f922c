#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
timeout 400 python3 .ab/gluon_sweep2.py 2>&1 | grep -v Warn
