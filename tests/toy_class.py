"""A small class of the toy assignment, graded for real, as the gradebook hands it on.

Four submissions are graded by the real engine (sandboxes, runner, write_outputs) into
OUT/reports/<sid>/, at once, once per test session; a fifth row is made by hand, as the gradebook
holds it: a late submission the grader itself failed on.
`toy_class(tmp_path_factory)` returns (OUT, rows, assignment); copy OUT before writing to it.
"""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from autograder.batch.records import ClassSubmission, GradedSubmission, LateStatus, Submitter
from autograder.grading.grade import grade
from autograder.grading.results import Report
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.paths import Project

TOY = Path(__file__).parent / "fixtures" / "toy"
CONFIG = TOY / "grading.yml"
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
RIGHT = "sum_shape: A\nfloat_types: [A, C]\n"
HOSTILE_NAME = "<script>alert('name')</script>"
FORMULA_NAME = "=HYPERLINK(\"http://example.invalid\")"
HOSTILE_ERROR = "<img src=x onerror=alert('error')>"
DUE = datetime(2025, 3, 1, 23, 59, tzinfo=timezone.utc)
GRADED_AT = "2025-03-02T10:00:00+00:00"

# key -> (submitters, toy.py or None, answers.yml or None, minutes late)
SUBMISSIONS = {
    "submission_101": ([Submitter("Alice Martin", "s001", "alice@example.edu")], GOOD, RIGHT, 0),
    # A group: divide is wrong and raises a hostile message for 0; the first answer is wrong.
    "submission_102": (
        [Submitter("Bob Stone", "s002", "bob@example.edu"),
         Submitter(HOSTILE_NAME, "s003", "mallory@example.edu")],
        textwrap.dedent("""\
            def add(a, b):
                return a + b


            def divide(a, b):
                if b == 0:
                    raise ValueError("<img src=x onerror=alert('message')>")
                return a * b


            def scale(x):
                return x * 2
            """), "sum_shape: B\nfloat_types: [A, C]\n", 0),
    # Late by 90 minutes; scale never returns (a real timeout); no answers file.
    "submission_103": (
        [Submitter("Carol Diaz", "s004", "carol@example.edu")],
        GOOD.replace("    return x * 2", "    while True:\n        pass"), None, 90),
    # Nothing done (the template's stubs, nothing answered); a formula for a name, no email.
    "submission_105": (
        [Submitter(FORMULA_NAME, "s006", "")],
        "def add(a, b):\n    raise NotImplementedError\n\n\n"
        "def divide(a, b):\n    raise NotImplementedError\n\n\n"
        "def scale(x):\n    raise NotImplementedError\n",
        "sum_shape: null\nfloat_types: null\n", 0),
}
LATE_PENALTY = 0.1  # what the late policy took from submission_103


def _late(minutes: float) -> LateStatus | None:
    if not minutes:
        return None
    return LateStatus(minutes, 1, LATE_PENALTY, f"submitted {minutes:g} minutes late: -10%")


def _grade_one(base: Path, key: str) -> GradedSubmission:
    submitters, source, answers, minutes = SUBMISSIONS[key]
    folder = base / "submissions" / key
    folder.mkdir(parents=True)
    if source is not None:
        (folder / "toy.py").write_text(source)
    if answers is not None:
        (folder / "answers.yml").write_text(answers)
    submission = ClassSubmission(key, folder, submitters, DUE + timedelta(minutes=minutes))
    out = base / "out" / "reports" / submission.sid
    graded = grade(folder, "toy", out, Project.of_config(CONFIG))
    report = Report.from_json(graded.to_json())  # as the gradebook stores it
    late = _late(minutes)
    penalty = late.penalty if late else 0.0
    return GradedSubmission(submission, 1, report, round(report.score * (1 - penalty), 4),
                            report.score, report.max_score, late, None, GRADED_AT,
                            report.execution_time)


def _failed(base: Path) -> GradedSubmission:
    """A late submission the grader itself failed on: no report, a hostile error text."""
    submission = ClassSubmission("submission_104", base / "submissions" / "submission_104",
                                 [Submitter("Dave Okafor", "s005", "dave@example.edu")],
                                 DUE + timedelta(minutes=30))
    return GradedSubmission(submission, 2, None, 0.0, 0.0, 0.0, _late(30),
                            f"the grader failed: RuntimeError: {HOSTILE_ERROR}", GRADED_AT, 0.5)


_CACHE: dict[str, tuple[Path, list[GradedSubmission], Assignment]] = {}


def toy_class(factory: pytest.TempPathFactory) -> tuple[Path, list[GradedSubmission], Assignment]:
    """(OUT, rows, assignment): OUT holds reports/<sid>/ of the graded submissions. Graded once
    per session (about 10 s, four gradings at once); treat OUT as read-only."""
    if "class" not in _CACHE:
        base = factory.mktemp("toy_class")
        with ThreadPoolExecutor(len(SUBMISSIONS)) as pool:
            graded = list(pool.map(lambda key: _grade_one(base, key), SUBMISSIONS))
        _CACHE["class"] = (base / "out", graded + [_failed(base)],
                           load_assignment("toy", Project.of_config(CONFIG)))
    return _CACHE["class"]
