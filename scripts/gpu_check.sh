#!/usr/bin/env bash
# GPU grader check for dp_basics: what the CPU-only test suite cannot cover (issue #16).
# The one prepared script for a session with a GPU machine; docs/GPU.md says how to run it.
#
#   install      (GPU machine) the carried wheels (.whl/, scripts/gpu_wheels.sh) and this
#                checkout into the machine's Python, when `import jsonschema, autograder` fails
#   environment  python, torch, CUDA build, GPUs, nvidia-smi, and the isolation in force
#   verify_key   `autograder verify-key dp_basics`: every snippet against its one-GPU expectation
#   grading      the reference graded with --require-gpu (100%, every @gpu test that needs one
#                GPU run and passed, not left out) and the blank template (0); tests needing more
#                GPUs than the machine has are listed as not run, with why
#   mutants      one mutant per GPU test (device placement forgotten, device_ids wrong, output
#                gathered on the wrong device, ...): its GPU test fails with a specific message
#   batch        a warm `autograder batch` of 3 submissions with CUDA visible: the runner server
#                never initialises CUDA (sampled in /proc), each sandbox does (GPU tests pass)
#   memory       a bounded memory hog under CUDA: stopped inside the sandbox, results.json written
#
# GPU_CHECK_DRY=1 runs the same parts on a machine without a GPU, with a CPU grader's
# expectations (GPU tests left out, mutants caught by the simulated-GPU tests, no --require-gpu),
# so the logic is exercised anywhere. GPU_CHECK_PARTS="environment grading" runs some parts only.
#
# Output: $OUT/gpu_check.log (everything) and $OUT/gpu_check.json (the summary); OUT defaults to
# ./gpu-check-out. The work folder (.gpu-check/run-PID/) holds TMPDIR and caches and is removed at the
# end (GPU_CHECK_KEEP=1 keeps it). On the GPU machine the parts after `environment` run at once,
# each under a timeout, so the whole script ends within 5 minutes. Exit 1 when any part failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
if [[ -x .venv/bin/python ]]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
OUT="${OUT:-$ROOT/gpu-check-out}"
LOG="$OUT/gpu_check.log"
SUMMARY="$OUT/gpu_check.json"
WORK="$ROOT/.gpu-check/run-$$"  # one per run: two runs at once (a test beside a TA) never meet
DRY="${GPU_CHECK_DRY:-0}"
PARTS="${GPU_CHECK_PARTS:-environment verify_key grading mutants batch memory}"
# Seconds per part: the GPU machine must finish within 5 minutes in all (install and environment
# first, the rest at once); the dry run on a small shared CPU machine gets more room.
if [[ $DRY == 1 ]]; then LIMIT=600; else LIMIT=210; fi

rm -rf "$WORK"
mkdir -p "$WORK/tmp" "$WORK/cache" "$WORK/parts" "$WORK/logs" "$OUT"
cleanup() { [[ ${GPU_CHECK_KEEP:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT
export TMPDIR="$WORK/tmp" XDG_CACHE_HOME="$WORK/cache" CUDA_CACHE_PATH="$WORK/cache/nv"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 GPU_CHECK_DRY="$DRY" GPU_CHECK_PARTS="$PARTS"

exec > >(tee "$LOG") 2>&1
TEE_PID=$!

record() {  # record NAME CODE STARTED: the part's status for the summary
    local name=$1 code=$2 seconds=$(($(date +%s) - $3)) status
    case $code in
        0) status=ok ;;
        124|137) status=timed-out ;;
        *) status=failed ;;
    esac
    echo "$status $seconds" >"$WORK/parts/$name.status"
    echo "--- $name: $status (exit $code, ${seconds}s)"
}

run_part() {  # run_part NAME: one part under its timeout, its output to the log as it comes
    local name=$1 started
    started=$(date +%s)
    echo
    echo "=== $name (timeout ${LIMIT}s)"
    timeout -k 5 "$LIMIT" "$PY" scripts/gpu_check.py "$name" "$WORK"
    record "$name" $? "$started"
}

install() {  # GPU machine: the carried wheels and this checkout into its Python (root, bare)
    "$PY" -c 'import jsonschema, autograder' 2>/dev/null && return 0
    local site
    site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl \
            || return 1
    fi
    # Not PYTHONPATH: the grader's runners and sandboxes run `python -I`, which ignores it.
    echo "$ROOT" >"$site/autograder-gpu-check.pth" || return 1
    "$PY" -c 'import jsonschema, autograder; print("installed:", autograder.__file__)'
}

echo "gpu_check: $(date -u +%FT%TZ) on $(hostname), mode $([[ $DRY == 1 ]] && echo dry || echo gpu)"
echo "python $PY; parts: $PARTS; log $LOG; summary $SUMMARY"
if [[ $DRY != 1 ]]; then
    echo
    echo "=== install (timeout 90s)"
    started=$(date +%s)
    export -f install
    export PY ROOT
    timeout -k 5 90 bash -c install
    code=$?
    echo "--- install: exit $code ($(($(date +%s) - started))s)"
    [[ $code == 0 ]] || echo "install failed: the parts below will fail to import the grader"
fi

[[ " $PARTS " == *" environment "* ]] && run_part environment
# The rest at once on the GPU machine (16 cores), each part's output kept apart and added to
# the log when it ends; one after the other in the dry run (a small machine: parts run at once
# there would trip the grader's own timeouts). GPU_CHECK_SERIAL=0/1 overrides.
SERIAL="${GPU_CHECK_SERIAL:-$DRY}"
pids=()
for name in $PARTS; do
    [[ $name == environment ]] && continue
    if [[ $SERIAL == 1 ]]; then run_part "$name"; continue; fi
    (
        started=$(date +%s)
        timeout -k 5 "$LIMIT" "$PY" scripts/gpu_check.py "$name" "$WORK" \
            >"$WORK/logs/$name.log" 2>&1
        code=$?
        {
            echo
            echo "=== $name (timeout ${LIMIT}s)"
            cat "$WORK/logs/$name.log"
            record "$name" $code "$started"
        } >"$WORK/logs/$name.done"
        cat "$WORK/logs/$name.done"
    ) &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

"$PY" scripts/gpu_check.py summary "$WORK" "$SUMMARY"
status=$?
echo
if [[ $status == 0 ]]; then
    echo "gpu_check: all parts passed (log: $LOG, summary: $SUMMARY)"
else
    echo "gpu_check: FAILED (log: $LOG, summary: $SUMMARY)"
fi
exec >&- 2>&-  # close the pipe so tee finishes writing the log
wait "$TEE_PID" 2>/dev/null
exit $status
