#!/usr/bin/env bash
# A/B timing of git refs (main against experimental branches) on one GPU, in one run.
#
# Step 1, where git and the build backend are (the CPU machine):
#     docs/perf/scripts/ab_refs.sh prep main exp/tiles exp/value-words
#   writes .ab/<name>/ (the ref's packages/ tree, for its tests) and .ab/<name>.whl/ (wheels of
#   tq-core and tq-triton), <name> being the ref with '/' turned into '-'.
# Step 2, on the GPU machine, with .ab carried along (no package index needed):
#     docs/perf/scripts/ab_refs.sh run OUTDIR main exp-tiles exp-tiles@TQ_GLUON=0
#   Each case is <name>[@VAR=VALUE[,VAR=VALUE...]]: the environment sets tq's overrides
#   (TQ_GLUON, TQ_SPLIT_BUDGET, TQ_MAX_REGISTERS...). Two rounds of `tq bench` over
#   AB_SHAPES (default decode-32k,verify-32k,poc) for AB_PRESETS, the cases interleaved, so
#   that a drift of the machine shows as a difference between rounds. AB_TABLE=NAME (a shipped
#   table, e.g. nvidia_h200) runs every case with that table's tiles whatever the GPU (an H100
#   matches no shipped table and otherwise gets the built-in tiles); AB_ARGS adds tq bench
#   arguments (e.g. "--kernel portable"); AB_WARM=N first compiles every case's kernels in N
#   parallel processes (one per case and shape, timings discarded). Logs go to OUTDIR;
#   the tq_triton rows are printed. AB_STORE=1 also times the store (its rows are printed
#   too); with AB_TESTS=1, each distinct ref's GPU test suite runs afterwards
#   (pytest-xdist, 8 workers); AB_MEMCHECK="tests/test_memory_safety.py ..." runs those test
#   files of each ref under compute-sanitizer's memcheck with the portable kernel (TQ_GLUON=0).
set -euo pipefail

cmd=${1:-}
shift || true
root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
cd "$root"

case "$cmd" in
prep)
    [ $# -ge 1 ] || { echo "usage: $0 prep REF [REF...]" >&2; exit 2; }
    py=${PYTHON:-python3}
    for ref in "$@"; do
        name=${ref//\//-}
        rm -rf ".ab/$name" ".ab/$name.whl"
        mkdir -p ".ab/$name"
        git archive "$ref" packages | tar -x -C ".ab/$name"
        for p in tq-core tq-triton; do
            log=$("$py" -m build -q --wheel --outdir ".ab/$name.whl" ".ab/$name/packages/$p" 2>&1) \
                || { echo "$log" >&2; exit 1; }
        done
        echo "$ref -> .ab/$name ($(git rev-parse --short "$ref"))"
    done
    ;;
run)
    [ $# -ge 2 ] || { echo "usage: $0 run OUTDIR CASE [CASE...]" >&2; exit 2; }
    out=$1
    shift
    mkdir -p "$out"
    shapes=${AB_SHAPES:-decode-32k,verify-32k,poc}
    presets=${AB_PRESETS:-turboquant_k3v4_nc,turboquant_k8v4}
    store=(--no-store)
    [ "${AB_STORE:-0}" = 1 ] && store=()
    # shellcheck disable=SC2206  # AB_ARGS is a list of tq bench arguments
    extra=(${AB_ARGS:-})
    declare -A site=()
    # the per-ref install folders are scratch: gone when the script ends
    trap 'rm -rf "${site[@]}"' EXIT
    for case in "$@"; do
        name=${case%%@*}
        [ -d ".ab/$name.whl" ] || { echo "no .ab/$name.whl: run '$0 prep' for it first" >&2; exit 2; }
        if [ -z "${site[$name]:-}" ]; then
            site[$name]=$(mktemp -d)
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --target "${site[$name]}" ".ab/$name.whl"/*.whl
        fi
    done
    if [ -n "${AB_TABLE:-}" ]; then
        # the first case's copy of the shipped table, matched to this GPU, as a user table
        first=${1%%@*}
        TQ_TUNING_DIR=$(mktemp -d)
        export TQ_TUNING_DIR
        trap 'rm -rf "${site[@]}" "$TQ_TUNING_DIR"' EXIT
        python3 - "${site[$first]}/tq_triton/tuning_tables/$AB_TABLE.json" "$TQ_TUNING_DIR/$AB_TABLE.json" <<'PY'
import json, sys
import torch
table = json.load(open(sys.argv[1]))
table["match"] = [torch.cuda.get_device_name() if torch.cuda.is_available() else "interpreter"]
json.dump(table, open(sys.argv[2], "w"))
print("tuning table:", sys.argv[1], "matched to", table["match"][0])
PY
    fi
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
        torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda device')"
    if [ "${AB_WARM:-0}" -gt 0 ]; then
        # compile first: every case's kernels for each shape in its own process, AB_WARM of
        # them at a time, their timings discarded; Triton's disk cache then serves the timed
        # rounds, which otherwise wait on the compiler one kernel after another
        echo "== compiling, $AB_WARM processes at a time"
        for case in "$@"; do
            name=${case%%@*}
            vars=()
            [ "$case" != "$name" ] && IFS=, read -r -a vars <<< "${case#*@}"
            for shape in ${shapes//,/ }; do
                while [ "$(jobs -rp | wc -l)" -ge "$AB_WARM" ]; do wait -n || true; done
                env ${vars[@]+"${vars[@]}"} PYTHONPATH="${site[$name]}" python3 -m tq_core.cli bench \
                    --shapes "$shape" --presets "$presets" --no-baselines --no-store ${extra[@]+"${extra[@]}"} \
                    >"$out/warm-${case//[^A-Za-z0-9_.-]/_}-$shape.log" 2>&1 &
            done
        done
        wait || true
    fi
    for round in 1 2; do
        for case in "$@"; do
            name=${case%%@*}
            vars=()
            [ "$case" != "$name" ] && IFS=, read -r -a vars <<< "${case#*@}"
            log="$out/ab-${case//[^A-Za-z0-9_.-]/_}-r$round.log"
            echo "== $case, round $round"
            env ${vars[@]+"${vars[@]}"} PYTHONPATH="${site[$name]}" python3 -m tq_core.cli bench \
                --shapes "$shapes" --presets "$presets" --no-baselines ${store[@]+"${store[@]}"} ${extra[@]+"${extra[@]}"} >"$log" 2>&1 \
                || { echo "   failed, see $log"; tail -3 "$log"; continue; }
            grep "tq_triton" "$log" || true
        done
    done
    if [ "${AB_TESTS:-0}" = 1 ]; then
        for name in "${!site[@]}"; do
            echo "== GPU tests of $name"
            # the installed wheels, not the source tree: tq's backend registers through their
            # entry points (test_api.py checks it)
            (cd ".ab/$name/packages/tq-triton" && PYTHONPATH="${site[$name]}" TQ_TEST_DEVICE=cuda \
                python3 -m pytest tests -q -p no:cacheprovider -n 8 >"$out/tests-$name.log" 2>&1; \
                tail -2 "$out/tests-$name.log")
        done
    fi
    if [ -n "${AB_MEMCHECK:-}" ]; then
        for name in "${!site[@]}"; do
            echo "== compute-sanitizer memcheck of $name, portable kernel: $AB_MEMCHECK"
            # shellcheck disable=SC2086  # AB_MEMCHECK is a list of test files
            (cd ".ab/$name/packages/tq-triton" && PYTHONPATH="${site[$name]}" TQ_TEST_DEVICE=cuda TQ_GLUON=0 \
                "${SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}" --tool memcheck --error-exitcode 9 \
                python3 -m pytest $AB_MEMCHECK -q -p no:cacheprovider >"$out/memcheck-$name.log" 2>&1; \
                echo "   rc $?"; grep -E "ERROR SUMMARY" "$out/memcheck-$name.log" | tail -1; tail -1 "$out/memcheck-$name.log")
        done
    fi
    ;;
*)
    echo "usage: $0 prep REF [REF...] | $0 run OUTDIR CASE [CASE...]" >&2
    exit 2
    ;;
esac
