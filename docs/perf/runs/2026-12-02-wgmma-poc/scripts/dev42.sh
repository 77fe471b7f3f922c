#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
timeout 100 python3 .ab/ab42.py 2>&1 | grep -v -i "warn\|return \|^  " | tee $OUT/ab42.txt
