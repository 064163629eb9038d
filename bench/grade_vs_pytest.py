"""Grading one submission vs bare pytest running the same tests in-process.

Prints, from one run with the two commands alternating (A B A B ...), the median wall time of
each, their ratio, and the per-pair ratios. The target (issue: grading engine) is a ratio of at
most 1.3: the sandbox wall may cost no more than 30% over running student code unprotected.

    .venv/bin/python bench/grade_vs_pytest.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def reference_submission(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from autograder.assignment import load_assignment
    from autograder.markers import reference

    assignment = load_assignment("dp_basics")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dp_basics.py").write_text(reference(assignment.solution.read_text()))
    key = {q.id: (list(q.answer) if q.multiple else q.answer[0])
           for q in assignment.bank.questions}
    (folder / "answers.yml").write_text(yaml.safe_dump(key))
    return folder


def timed(command: list[str], env: dict | None = None) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - started
    # pytest exit 1 = some tests failed: the in-process baseline's two 2-rank training tests do
    # (forked ranks differ there), after their ranks have run; the timing still compares.
    if result.returncode not in (0, 1):
        sys.exit(f"command failed ({result.returncode}): {' '.join(command)}\n"
                 f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        submission = reference_submission(work / "reference")
        grade = [str(BIN / "autograder"), "grade", str(submission), "--assignment",
                 "dp_basics", "--out", str(work / "out")]
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "-p", "bench.inprocess_plugin", "--rootdir", str(work), "-c", os.devnull,
                  "--import-mode=importlib", "-W", "ignore::DeprecationWarning",
                  str(ROOT / "assignments" / "dp_basics" / "tests" / "hidden")]
        env = {**os.environ, "BENCH_MODULE": "dp_basics", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(submission),
                                              str(ROOT / "assignments" / "dp_basics")])}
        timed(grade), timed(pytest, env)  # warm-up: file caches
        a, b = [], []
        for _ in range(runs):
            a.append(timed(grade))
            b.append(timed(pytest, env))
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        print(f"runs: {runs} each, alternating")
        print(f"A  autograder grade (sandboxed)       median {statistics.median(a):6.2f} s  "
              f"(min {min(a):.2f}, max {max(a):.2f})")
        print(f"B  bare pytest, student in-process    median {statistics.median(b):6.2f} s  "
              f"(min {min(b):.2f}, max {max(b):.2f})")
        print(f"A/B per pair: {', '.join(f'{r:.2f}' for r in ratios)}; "
              f"median ratio {statistics.median(ratios):.2f} (target <= 1.30)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
