#!/usr/bin/env bash
# mutations of the Gluon kernel's 3-bit path, each must fail test_matches_reference
set -u
python3 -m pip install -q --no-index --find-links .whl hatchling editables 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e packages/tq-core -e packages/tq-triton 2>&1 | tail -1
K=packages/tq-triton/src/tq_triton/attention/gluon_kernel.py
cp $K /tmp/k.py
run() { (cd packages/tq-triton && TQ_TEST_DEVICE=cuda timeout 60 python3 -m pytest tests/test_gluon_kernel.py -q -n 8 -p no:cacheprovider -k "matches_reference and k3v4 and one_buffer and 128" 2>&1 | tail -1); }
echo "== unmutated"; run
sed -i 's/LOG2_D - 1, LOG2_D)/LOG2_D - 1, LOG2_D - 1)/' $K; grep -c "LOG2_D - 1, LOG2_D - 1)" $K; echo "== A: query Hadamard without its last stage"; run; cp /tmp/k.py $K
sed -i 's/knorm \* gl.rsqrt(cn2)/knorm/' $K; echo "== B: no norm correction"; run; cp /tmp/k.py $K
sed -i 's/gl.join(gl.join(c0, c2), gl.join(c1, c3))/gl.join(gl.join(c0, c1), gl.join(c2, c3))/' $K; echo "== C: centroids out of order"; run; cp /tmp/k.py $K
