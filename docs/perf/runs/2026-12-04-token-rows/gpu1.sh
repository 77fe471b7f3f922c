#!/usr/bin/env bash
# Call 1, from the repository root with .ab carried (.ab/new.whl: the wheels of the tree;
# .ab/src: its tests): the token-rows kernel's GPU tests, then time_tr.py.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-new .ab/new.whl/*.whl
export PYTHONPATH=/tmp/site-new TQ_TUNING_DIR=/tmp/no-user-tables
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
date -u
echo "== token-rows GPU tests"
( cd .ab/src/packages/tq-triton && TQ_TEST_DEVICE=cuda timeout ${SUITE_TIMEOUT:-200} python3 -m pytest tests/test_token_rows_kernel.py \
    -q -p no:cacheprovider -n 12 -W ignore -k "${K:-not nothing}" >"$OUT/tr-tests.log" 2>&1; echo "rc=$?"; grep -E "^FAILED|^E  |passed|failed" "$OUT/tr-tests.log" | head -30 )
date -u
echo "== time_tr"
( cd "$OUT" && PYTHONUNBUFFERED=1 timeout ${T2:-300} python3 -W ignore "$OLDPWD/docs/perf/runs/2026-12-04-token-rows/time_tr.py" ${SHAPES:-} 2>&1 | grep -v "^Triton" | tee time_tr.log | grep -E "bf16|table|failed" ; sort -t: -k2 -n time_tr.log | grep " tr " | head -0 )
python3 - <<'PY'
import json, os
rows = json.load(open(os.environ.get("OUT", "/tmp/out") + "/time_tr.json"))
best = {}
for r in rows:
    if r["cfg"] == "table":
        continue
    k = (r["shape"], r["preset"])
    if k not in best or r["ms"] < best[k]["ms"]:
        best[k] = r
for k, r in best.items():
    print("best", k, r["cfg"], f"{r['ms']:.4f} ms, {r['bf16'] / r['ms']:.2f}x bf16, maxdiff {r['err']:.2e}")
PY
date -u
