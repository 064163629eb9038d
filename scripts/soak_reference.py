"""Grade an assignment's reference solution many times in a row, to catch flaky grading.

The reference must get full coding marks every time: a run that scores less, or raises, is a
failure of the grader (sandbox start-up, gloo rendezvous, timeouts under load), never of the
student. Prints progress every 10 runs and ends with

    N runs, F failures, median X s per run

exiting 1 when F > 0. The outputs of failed runs are kept, and their paths printed.

    .venv/bin/python scripts/soak_reference.py --runs 200
    .venv/bin/python scripts/soak_reference.py --assignment ddp_training --runs 100 --minutes 10

With --minutes, no run starts once that much time has passed; the summary counts the runs done.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from autograder.grading.grade import grade_loaded
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.markers import reference
from autograder.project.paths import Project


def run_once(submission: Path, assignment: Assignment, out: Path) -> str | None:
    """Grade once; None when the coding part got full marks, else what went wrong."""
    try:
        report = grade_loaded(submission, assignment, out)
    except Exception:  # the soak counts it and goes on
        return "grading raised:\n" + traceback.format_exc()
    coding = next(p for p in report.parts if p.name == "coding")
    if abs(coding.score - coding.max_score) < 1e-6:
        return None
    lost = [f"  {t.status} {t.name}: {t.message}" for t in report.tests
            if t.part == "coding" and t.status not in ("passed", "excluded")]
    return f"coding {coding.score:g} / {coding.max_score:g}\n" + "\n".join(lost)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="gradings in a row (default 200)")
    parser.add_argument("--assignment", "-a", default="dp_basics",
                        help="the assignment whose reference is graded (default dp_basics)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="start no run after this many minutes (default: no limit)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="soak-reference-"))
    submission = work / "submission"
    submission.mkdir()
    assignment = load_assignment(args.assignment, Project.find())
    (submission / f"{assignment.config.module}.py").write_text(
        reference(assignment.solution.read_text()))
    print(f"grading the {args.assignment} reference solution {args.runs} times "
          f"(work folder {work})", flush=True)
    stop = None if args.minutes is None else time.monotonic() + 60 * args.minutes

    durations: list[float] = []
    failures = 0
    done = 0
    for run in range(1, args.runs + 1):
        if stop is not None and time.monotonic() >= stop:
            print(f"time limit of {args.minutes:g} min reached before run {run}", flush=True)
            break
        done = run
        out = work / f"run-{run}"
        started = time.monotonic()
        problem = run_once(submission, assignment, out)
        durations.append(time.monotonic() - started)
        if problem is None:
            shutil.rmtree(out, ignore_errors=True)  # 200 report folders add up
        else:
            failures += 1
            print(f"run {run}: FAILED after {durations[-1]:.1f} s (outputs kept in {out})\n"
                  f"{problem}", flush=True)
        if run % 10 == 0 and run < args.runs:
            print(f"{run}/{args.runs} runs, {failures} failures, "
                  f"median {statistics.median(durations):.1f} s per run", flush=True)

    median = statistics.median(durations) if durations else 0.0
    print(f"{done} runs, {failures} failures, median {median:.1f} s per run", flush=True)
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
