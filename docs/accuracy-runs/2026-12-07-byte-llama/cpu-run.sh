#!/bin/bash
# byte-llama-13m (trained on the H100 2026-12-07), tq-core on 2 CPU cores: cross-domain calibration rows
set -e
PY=/work/main/.nox/tests-eval/bin/python; M=/tmp/bm
export TQ_CACHE_DIR=/work/main/.nox/tq-cache
for name in mixed legal pydoc news; do
  case $name in
    mixed) args=();; legal) args=(--text legal.txt);; pydoc) args=(--text pydoc-topics.txt);; news) args=(--text idle-news.txt);;
  esac
  /usr/bin/time -f "$name calibrate %e s" $PY -m tq_core.cli calibrate --model $M --device cpu -q --out cal_$name.pt "${args[@]}" \
      --held-out legal.txt --held-out pydoc-topics.txt 2>>times.txt | tee calibrate_$name.txt
done
for text in legal pydoc-topics idle-news; do
  $PY -m tq_core.cli eval --model $M --device cpu -q --text $text.txt \
      --formats turboquant_k3v4_nc,turboquant_4bit_nc,turboquant_k8v4 --json vllm_$text.json > vllm_$text.txt
  for cal in mixed legal pydoc news; do
    $PY -m tq_core.cli eval --model $M --device cpu -q --text $text.txt --calibration cal_$cal.pt \
        --formats tq_k4v3,tq_k4v4,tq_k6v5 --json ${cal}_on_$text.json > ${cal}_on_$text.txt
    echo "== calibrated on $cal, scored on $text"; grep -E '^tq_' ${cal}_on_$text.txt
  done
done
