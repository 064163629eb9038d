#!/usr/bin/env bash
# GPU grader check for dp_basics: what the CPU-only test suite cannot cover.
#
#   environment  nvidia-smi -L and torch.cuda.device_count()
#   snippets     pytest tests/assignments/test_dp_basics_snippets.py: the question bank's snippets
#                against their expectations for this machine (one_gpu / multi_gpu columns)
#   grading      the reference solution graded by the engine; the hidden tests marked
#                @pytest.mark.gpu must pass here, not be left out as on a CPU grader
#
# Everything goes to one log: $OUT/gpu_check.log when OUT is set, else ./gpu_check.log (repo root).
# Nothing is written outside the repo but that log: the work folder, TMPDIR and caches live in
# ./.gpu-check/ and are removed at the end. Each part has a timeout, so the whole script ends
# within 5 minutes. Exit status 1 when any part failed, which includes "no GPU on this machine".
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
if [[ -x .venv/bin/python ]]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
LOG="${OUT:+$OUT/gpu_check.log}"
LOG="${LOG:-$ROOT/gpu_check.log}"
WORK="$ROOT/.gpu-check"

rm -rf "$WORK"
mkdir -p "$WORK/tmp" "$WORK/cache" "$(dirname "$LOG")"
trap 'rm -rf "$WORK"' EXIT
# Temporary folders of the engine (and of torch) and CUDA's kernel cache stay in the repo.
export TMPDIR="$WORK/tmp" XDG_CACHE_HOME="$WORK/cache" CUDA_CACHE_PATH="$WORK/cache/nv"
export PYTHONUNBUFFERED=1

exec > >(tee "$LOG") 2>&1
TEE_PID=$!

FAILED=()
part() {  # part NAME SECONDS COMMAND...: run one part under a timeout, record a failure
    local name=$1 seconds=$2 started=$SECONDS code
    shift 2
    echo
    echo "=== $name (timeout ${seconds}s)"
    timeout -k 5 "$seconds" "$@"
    code=$?
    case $code in
        0) echo "--- $name: ok ($((SECONDS - started))s)" ;;
        124|137) echo "--- $name: TIMED OUT after ${seconds}s"; FAILED+=("$name") ;;
        *) echo "--- $name: FAILED (exit $code, $((SECONDS - started))s)"; FAILED+=("$name") ;;
    esac
}

environment() {
    local code=0
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi -L || code=1
    else
        echo "nvidia-smi: not found (no NVIDIA driver on this machine)"
        code=1
    fi
    "$PY" -c 'import torch
n = torch.cuda.device_count()
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, "
      f"torch.cuda.device_count() = {n}")
raise SystemExit(0 if n else 1)' || code=1
    [[ $code == 0 ]] || echo "no GPU present: this machine cannot check the GPU tests"
    return $code
}

echo "gpu_check: $(date -u +%FT%TZ) on $(hostname), python $PY, log $LOG"
# Budgets: 20 + 110 + 150 s, under the 5 minutes the whole script may take.
export PY
export -f environment  # timeout runs programs, not shell functions
part environment 20 bash -c environment
part snippets 110 "$PY" -m pytest -q -p no:cacheprovider tests/assignments/test_dp_basics_snippets.py
part grading 150 "$PY" - "$WORK" <<'PYTHON'
"""Grade the reference solution; list the GPU tests; fail unless they ran and passed."""
import ast
import sys
from pathlib import Path

from autograder.assignment import load_assignment
from autograder.grade import grade_loaded
from autograder.markers import reference

work = Path(sys.argv[1])
assignment = load_assignment("dp_basics")
submission = work / "reference"
submission.mkdir()
(submission / "dp_basics.py").write_text(reference(assignment.solution.read_text()))


def gpu_tests() -> list[str]:
    """Display names of the hidden tests marked @pytest.mark.gpu."""
    names = []
    for path in sorted(assignment.hidden_tests.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == "pytest.mark.gpu" for d in node.decorator_list):
                names.append((ast.get_docstring(node) or node.name).splitlines()[0])
    return names


report = grade_loaded(submission, assignment, work / "out")
gpus = report.environment.get("gpus", 0)
coding = next(p for p in report.parts if p.name == "coding")
by_name = {t.name: t for t in report.tests}
print(f"reference solution: coding {coding.score:g} / {coding.max_score:g}, total "
      f"{report.score:g} / {report.max_score:g}; the runner saw {gpus} GPU(s)")
for warning in report.warnings:
    print(f"note: {warning}")

problems = []
if abs(coding.score - coding.max_score) > 1e-6:
    problems.append("the reference solution lost coding points")
print("\nGPU tests (@pytest.mark.gpu):")
for name in gpu_tests():
    test = by_name.get(name)
    if test is None:
        problems.append(f"GPU test not in the report: {name}")
        continue
    print(f"  {test.status:9} {test.score:g} / {test.max_score:g}  {name}")
    if test.status != "passed":
        print(f"            {test.message}")
        # Left out is expected only without a GPU, or for a 2-GPU test on a 1-GPU machine.
        needs_two = "2 GPUs" in name
        if not (test.status == "excluded" and (gpus == 0 or (gpus == 1 and needs_two))):
            problems.append(f"GPU test {test.status}: {name}")
if gpus == 0:
    print("no GPU present: the GPU tests were excluded (the CPU grader's reweighting)")

print("\n----- report.md")
print((work / "out" / "report.md").read_text())
for problem in problems:
    print(f"PROBLEM: {problem}")
sys.exit(1 if problems else 0)
PYTHON

echo
if ((${#FAILED[@]})); then
    echo "gpu_check: FAILED: ${FAILED[*]} (log: $LOG)"
    status=1
else
    echo "gpu_check: all parts passed (log: $LOG)"
    status=0
fi
exec >&- 2>&-  # close the pipe so tee finishes writing the log
wait "$TEE_PID" 2>/dev/null
exit $status
