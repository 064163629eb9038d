"""Grade one submission end to end: `grade(submission, assignment, out)`.

submission -> (answers graded here, code run by the runner in sandboxes) -> Report -> files.
This is the trusted parent: it never imports torch, student code or the hidden tests.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .assignment import Assignment, load_assignment
from .coding import run_hidden_tests
from .multiple_choice import grade_answers
from .paths import GRADING_CONFIG
from .report import write_outputs
from .results import Report, TestResult, build_report, coding_results
from .submission import locate


def grade(submission: Path, assignment: str, out: Path,
          config_path: Path = GRADING_CONFIG) -> Report:
    """Grade `submission` (a folder) and write results.json and the reports into `out`."""
    started = time.monotonic()
    spec = load_assignment(assignment, config_path)
    return grade_loaded(submission, spec, out, started)


def grade_loaded(submission: Path, assignment: Assignment, out: Path,
                 started: float | None = None) -> Report:
    started = time.monotonic() if started is None else started
    config = assignment.config
    files = locate(submission, config.module)
    warnings = list(files.warnings)

    mc = grade_answers(assignment.bank, files.answers)
    warnings += mc.warnings
    tests = [_question_result(r, assignment) for r in mc.results]

    workdir = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        outcomes, coding_warnings, environment = run_hidden_tests(assignment, files, workdir)
    finally:
        # AUTOGRADER_KEEP_WORKDIR=1 keeps runner.log (pytest's own output) for instructors.
        if os.environ.get("AUTOGRADER_KEEP_WORKDIR"):
            print(f"autograder: kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if files.module_problem:
        warnings.append(f"coding part: {files.module_problem}")
    warnings += coding_warnings
    tests += coding_results(outcomes, config, warnings)
    environment["gpu_policy"] = config.gpu_policy
    report = build_report(config, submission.name, tests, warnings, environment,
                          time.monotonic() - started)
    write_outputs(report, out)
    return report


def _question_result(r, assignment: Assignment) -> TestResult:
    feedback = []
    if assignment.config.reveal_key:
        feedback = [f"Correct answer: {', '.join(r.key)}", r.explanation]
    return TestResult(
        name=r.title, part="multiple_choice", item=r.id, score=r.score, max_score=r.max_score,
        status="passed" if r.status == "correct" else "failed", message=r.message,
        visibility=assignment.config.multiple_choice.visibility, feedback=feedback)
