"""What students are shown, decided once as of the grading time: before the due date no file
they receive holds the right or wrong of an `after_due_date` result, nor a total that counts
one (two gradings that differ in one answer give the same files); after it, everything.

The gradings are real (toy assignment, sandboxes, runner, write_outputs), on a copy of the toy
course whose multiple choice has grading.yml's default visibility, after_due_date, and
reveal_key on (so the key itself is in the full report, next to each question)."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from repo_project import REPO
from report_records import AN_ENVIRONMENT

from autograder.grading.grade import grade
from autograder.grading.late import LateStatus
from autograder.grading.results import Report, apply_late
from autograder.grading.results import TestResult as Result  # not a pytest class
from autograder.grading.visibility import Release, release_due, student_view
from autograder.project.config import ConfigError, load_config
from autograder.project.paths import Project
from autograder.project.schemas import validate

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
RIGHT = "sum_shape: A\nfloat_types: [A, C]\n"
WRONG = "sum_shape: B\nfloat_types: [A, C]\n"  # one answer changed
STUDENT_FILES = ("results.json", "report.json", "report.md", "report.html")
KEY_LINES = ("Correct answer", "Summing over dim 0")  # reveal_key's lines for sum_shape


def course(tmp: Path, due: str) -> Path:
    """The toy course with a due date and grading.yml's default multiple-choice visibility."""
    root = tmp / "course"
    shutil.copytree(TOY, root)
    config = root / "grading.yml"
    text = config.read_text().replace(", visibility: visible}", "}")
    config.write_text(text.replace("    module: toy\n", f'    module: toy\n    due: "{due}"\n'))
    return config


def graded(tmp: Path, config: Path, answers: str) -> tuple[Report, Path, Path]:
    folder = tmp / "submission"
    folder.mkdir(parents=True)
    (folder / "toy.py").write_text(GOOD)
    (folder / "answers.yml").write_text(answers)
    out, staff = tmp / "out", tmp / "staff"
    return grade(folder, "toy", out, Project.of_config(config), staff_out=staff), out, staff


@pytest.fixture(scope="module")
def gradings(tmp_path_factory) -> dict[str, tuple[Report, Path, Path]]:
    """Right and wrong before the due date (3000), and wrong after it (2020), at once."""
    base = tmp_path_factory.mktemp("visibility")
    cases = {"right": ("3000-01-01T00:00:00Z", RIGHT), "wrong": ("3000-01-01T00:00:00Z", WRONG),
             "after": ("2020-01-01T00:00:00Z", WRONG)}

    def one(name: str) -> tuple[Report, Path, Path]:
        due, answers = cases[name]
        return graded(base / name, course(base / name, due), answers)

    with ThreadPoolExecutor(len(cases)) as pool:  # ~15 s each
        return dict(zip(cases, pool.map(one, cases), strict=True))


def student_files(out: Path) -> dict[str, str]:
    """Every file of OUT (the folder the student receives), by name."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(out.iterdir()) if p.is_file()}


def comparable(name: str, text: str) -> str:
    """A student file without what differs between any two gradings: the time grading took,
    when it ran and the machine it ran on (the simulated GPUs drawn, the time budgets)."""
    if name.endswith(".json"):
        data = json.loads(text)
        data.pop("execution_time", None)
        data.pop("environment", None)
        (data.get("release") or {}).pop("graded_at", None)
        return json.dumps(data, sort_keys=True)
    return "\n".join(line for line in text.splitlines()
                     if "Graded in" not in line and "<li><small>" not in line)


def test_before_the_due_date_no_student_file_holds_right_or_wrong(gradings):
    report, out, staff = gradings["wrong"]
    files = student_files(out)
    assert set(STUDENT_FILES) <= set(files)
    for name, text in files.items():
        for line in KEY_LINES:
            assert line not in text, f"{name} reveals the key: {line!r}"
    data = json.loads(files["report.json"])
    validate(data, "report.schema.json", "report.json", REPO.schemas)
    question = next(t for t in data["tests"] if t["item"] == "sum_shape")
    assert (question["status"], question["score"], question["feedback"]) == ("withheld", 0, [])
    assert question["message"].startswith("Shown after 3000-01-01 00:00 UTC")
    results = json.loads(files["results.json"])
    entry = next(t for t in results["tests"] if t["tags"] == ["multiple_choice", "sum_shape"])
    assert entry["visibility"] == "after_due_date" and entry["score"] == 0
    assert "status" not in entry  # no verdict for Gradescope to show either
    # The score students see counts the coding part only, and says so.
    assert results["score"] == data["score"] == report.parts[1].score == 8
    assert "This score counts the coding part only" in results["output"]
    assert "Multiple choice: not shown yet (2 points, not counted yet)" in results["output"]
    assert "| Multiple choice | not shown yet | 2 |" in files["report.md"]
    # The staff's copy holds it all: the wrong answer, the key, the full total.
    full = json.loads((staff / "report.json").read_text())
    assert next(t for t in full["tests"] if t["item"] == "sum_shape")["status"] == "failed"
    assert "Correct answer: A" in (staff / "report.md").read_text()
    assert full["score"] == report.score == 9
    assert full["release"]["withheld_after_due_date"] == 2


def test_a_resubmission_with_another_answer_changes_nothing_students_receive(gradings):
    (right, right_out, _), (wrong, wrong_out, _) = gradings["right"], gradings["wrong"]
    assert right.score != wrong.score  # the grader told them apart
    right_files, wrong_files = student_files(right_out), student_files(wrong_out)
    assert set(right_files) == set(wrong_files)
    for name in right_files:
        assert comparable(name, right_files[name]) == comparable(name, wrong_files[name]), name


def test_after_the_due_date_everything_is_shown(gradings):
    report, out, _ = gradings["after"]
    files = student_files(out)
    data = json.loads(files["report.json"])
    assert [t["status"] for t in data["tests"] if t["part"] == "multiple_choice"] == \
        ["failed", "passed"]
    assert data["score"] == report.score == 9 and data["release"]["withheld"] == 0
    results = json.loads(files["results.json"])
    assert results["score"] == 9 and "counts" not in results["output"]
    assert "Multiple choice: 1 / 2" in results["output"]
    assert "Correct answer: A" in files["report.md"]
    assert not release_due(Report.from_json(data))


# ----------------------------------------------------------------------------- the view itself

DUE = datetime(2026, 12, 18, 5, 14, tzinfo=timezone.utc)


def made(tests: list[Result], graded_at: datetime, late: LateStatus | None = None) -> Report:
    cents = {p: sum(round(t.score * 100) for t in tests if t.part == p)
             for p in ("multiple_choice", "coding")}
    from autograder.grading.results import PartScore

    report = Report("toy", "Toy", "s", sum(cents.values()) / 100, 10,
                    [PartScore(p, c / 100, 5) for p, c in cents.items()], tests, [], AN_ENVIRONMENT)
    report = apply_late(report, late)
    report.release = Release(graded_at, DUE).record(tests)
    return report


TESTS = [
    Result("Q1", "multiple_choice", "q1", 2.5, 2.5, "passed", "answered", "", "after_due_date",
           feedback=["Correct answer: A"]),
    Result("Q2", "multiple_choice", "q2", 0.0, 2.5, "failed", "not_answered", "not answered",
           "visible",
           feedback=["Correct answer: C"], feedback_visibility="after_due_date"),
    Result("add: adds", "coding", "add", 3.0, 3.0, "passed", "passed", "", "visible"),
    Result("add: hidden", "coding", "add", 0.0, 0.0, "passed", "passed", "", "hidden"),
    Result("add: later", "coding", "add", 2.0, 2.0, "passed", "passed", "", "after_due_date"),
]


@pytest.mark.parametrize("visibility, before, after", [
    ("visible", True, True), ("after_due_date", False, True), ("hidden", False, False),
    ("after_published", False, False)])
def test_each_gradescope_visibility_as_of_the_grading_time(visibility, before, after):
    assert Release(DUE - timedelta(seconds=1), DUE).shown(visibility) is before
    assert Release(DUE, DUE).shown(visibility) is after
    assert not Release(DUE + timedelta(days=999), None).shown("after_due_date")  # no due date


def test_the_view_counts_only_what_it_shows_and_takes_the_late_penalty_off_that():
    late = LateStatus(100.0, 1, 0.1, "1 day late: 10% off.")
    view = student_view(made(TESTS, DUE - timedelta(hours=1), late))
    assert [t.status for t in view.tests] == ["withheld", "failed", "passed", "withheld",
                                              "withheld"]
    # A withheld result's cause would tell its outcome (passed, not_implemented...): withheld.
    assert [t.cause for t in view.tests] == ["withheld", "not_answered", "passed", "withheld",
                                             "withheld"]
    assert [p.score for p in view.parts] == [0, 3]
    assert view.late.raw_score == 3 and view.score == 2.7
    assert view.tests[1].feedback == []  # the key of an unanswered question waits too
    assert view.release.withheld_points == 4.5 and view.release.withheld == 3
    assert student_view(view) == view  # a view of a view is the same view
    shown = student_view(made(TESTS, DUE, late))
    assert [p.score for p in shown.parts] == [2.5, 5] and shown.score == 6.75
    assert shown.tests[1].feedback == ["Correct answer: C"]
    assert shown.tests[3].status == "withheld"  # hidden stays hidden (it is worth nothing)


def test_a_batch_regrades_once_withheld_results_are_due():
    before = Report.from_json(made(TESTS, DUE - timedelta(hours=1)).to_json())  # as stored
    assert not release_due(before, DUE - timedelta(minutes=1))
    assert release_due(before, DUE)
    assert not release_due(made(TESTS, DUE), DUE + timedelta(days=1))
    assert not release_due(None)


@pytest.mark.parametrize("part", ["multiple_choice", "coding"])
@pytest.mark.parametrize("visibility", ["hidden", "after_published"])
def test_points_that_students_would_never_be_shown_are_refused(tmp_path, part, visibility):
    config = tmp_path / "grading.yml"
    text = (TOY / "grading.yml").read_text()
    if part == "coding":
        text = text.replace("        points: 8\n", f"        points: 8\n        visibility: "
                                                   f"{visibility}\n")
    else:
        text = text.replace("visibility: visible}", f"visibility: {visibility}}}")
    config.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(f"parts.{part}.visibility")):
        load_config(Project.of_config(config))
    # A hidden test worth points: tests/runner/test_pytest_plugin.py.


def test_a_part_partly_shown_says_what_its_total_counts(tmp_path):
    """One question shown (unanswered: 0 points), one withheld: the row must not read 0 / 5,
    in any file, but say what the 0 is out of and what is not counted yet."""
    from autograder.grading.report import write_outputs

    report = made(TESTS, DUE - timedelta(hours=1))
    write_outputs(report, tmp_path, REPO.schemas)
    files = student_files(tmp_path)
    assert "| Multiple choice | 0 of 2.5 shown so far (2.5 more not counted yet) | 5 |" in \
        files["report.md"]
    assert "<td>Multiple choice</td><td class=\"num\">0 of 2.5 shown so far (2.5 more not " \
           "counted yet)</td>" in files["report.html"]
    assert "Multiple choice: 0 / 2.5 shown so far, 2.5 more points not counted yet" in \
        json.loads(files["results.json"])["output"]
