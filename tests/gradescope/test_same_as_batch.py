"""One late policy: a submission graded by the Gradescope path (run_autograder's Python entry,
`run_in_container`, with Gradescope's submission_metadata.json) and by `autograder batch` (a
Gradescope export with the same submission and time) gets the same score and the same late
entry, in the same words. Both gradings are real (toy course, sandboxes, runner), at once.

Also how submission_metadata.json's dates are read (autograder.gradescope.metadata)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import pytest

from autograder.batch.driver import batch
from autograder.batch.gradebook import Gradebook
from autograder.gradescope.entry import run_in_container
from autograder.gradescope.metadata import submission_dates
from autograder.grading.late import SubmissionDates
from autograder.project.paths import Project

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
RIGHT = "sum_shape: A\nfloat_types: [A, C]\n"
DUE = "2020-01-01T00:00:00Z"
CREATED = "2020-01-03T00:30:00.000000+00:00"  # 2 days 30 minutes late: 3 started days
LATE = {"policy": "per_day", "percent_per_day": 10, "max_days": 3, "grace_minutes": 0}


def course(base: Path) -> Path:
    root = base / "course"
    shutil.copytree(TOY, root)
    config = root / "grading.yml"
    text = config.read_text().replace(", visibility: visible}", "}")  # the default: after due
    config.write_text(text.replace("    module: toy\n", f'    module: toy\n    due: "{DUE}"\n'
                                   f"    late: {json.dumps(LATE)}\n"))
    return root


def gradescope_path(base: Path, project: Path) -> dict:
    root = base / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / "toy.py").write_text(GOOD)
    (root / "submission" / "answers.yml").write_text(RIGHT)
    (root / "submission_metadata.json").write_text(json.dumps({
        "id": 1, "created_at": CREATED,
        "assignment": {"due_date": DUE, "late_due_date": None, "title": "Toy"},
        "users": [{"name": "Ada Lovelace", "email": "ada@example.edu", "id": 7}]}))
    assert run_in_container(root, "toy", Project.at(project, "the course")) == 0
    return json.loads((root / "results" / "results.json").read_text())


def batch_path(base: Path, project: Path) -> tuple[dict, object]:
    export = base / "export"
    (export / "submission_1").mkdir(parents=True)
    (export / "submission_1" / "toy.py").write_text(GOOD)
    (export / "submission_1" / "answers.yml").write_text(RIGHT)
    (export / "submission_metadata.yml").write_text(
        "submission_1:\n  :submitters:\n  - :name: Ada Lovelace\n    :sid: '001'\n"
        "    :email: ada@example.edu\n  :created_at: 2020-01-03 00:30:00.000000000 Z\n")
    out = base / "out"
    batch(export, "toy", out, jobs=1, project=Project.at(project, "the course"), progress=False)
    with Gradebook(out / "gradebook.sqlite") as book:
        row = book.latest()[0]
    return json.loads((out / "reports" / "001" / "results.json").read_text()), row


@pytest.fixture(scope="module")
def both(tmp_path_factory, monkeypatch_module) -> tuple[dict, dict, object]:
    base = tmp_path_factory.mktemp("same")
    project = course(base)
    monkeypatch_module.setenv("AUTOGRADER_ROOT", str(project))  # run_autograder's project
    with ThreadPoolExecutor(2) as pool:
        gradescope = pool.submit(gradescope_path, base, project)
        batched = pool.submit(batch_path, base, project)
        return (gradescope.result(), *batched.result())


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def late_line(results: dict) -> str:
    return next(line for line in results["output"].splitlines() if line.startswith("Late: "))


def test_the_gradescope_path_and_a_batch_give_the_same_score_and_late_entry(both):
    gradescope, batched, row = both
    assert gradescope["score"] == batched["score"] == row.score == 7  # 10, less 3 days at 10%
    assert late_line(gradescope) == late_line(batched) == (
        "Late: Submitted 2 days 30 minutes after the due date: 3 days late, so 30% is taken off "
        "the score. Total 10 -> 7.")
    penalty = [t for t in gradescope["tests"] if t["tags"] == ["late"]]
    assert penalty == [t for t in batched["tests"] if t["tags"] == ["late"]]
    assert penalty[0]["score"] == -3 and penalty[0]["name"] == "Late penalty"
    assert [(t["name"], t["score"], t.get("status")) for t in gradescope["tests"]] == \
        [(t["name"], t["score"], t.get("status")) for t in batched["tests"]]
    assert (row.late.days_late, row.late.penalty) == (3, 0.3)
    assert gradescope["output"].startswith("Submitted by Ada Lovelace.\n")


# ----------------------------------------------------------------------------- the metadata

def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)


def metadata(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "submission_metadata.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_an_extension_and_the_late_due_date_are_read_from_the_metadata(tmp_path):
    due = "2026-12-14T23:59:00.000000-05:00"
    dates, notes = submission_dates(metadata(tmp_path, {
        "created_at": "2026-12-16T10:00:00.123456-05:00",
        "assignment": {"due_date": due, "late_due_date": "2026-12-17T23:59:00-05:00"},
        "users": [{"name": "A", "assignment": {"due_date": due}},
                  {"name": "B", "assignment": {"due_date": "2026-12-16T23:59:00-05:00",
                                               "late_due_date": "2026-12-19T23:59:00-05:00"}}]}),
        "2026-12-14T23:59:00-05:00")
    assert notes == []
    assert dates == SubmissionDates(created_at=at("2026-12-16T15:00:00.123456+00:00"),
                                    extended_due=at("2026-12-17T04:59:00+00:00"),
                                    platform_closes=at("2026-12-20T04:59:00+00:00"))


def test_a_due_date_that_is_not_grading_yml_s_is_said_for_staff(tmp_path):
    dates, notes = submission_dates(metadata(tmp_path, {
        "created_at": "2026-12-15T10:00:00Z", "assignment": {"due_date": "2026-12-15T23:59:00Z"},
        "users": []}), "2026-12-14T23:59:00-05:00")
    assert dates.extended_due is None and dates.platform_closes == at("2026-12-15T23:59:00Z")
    assert len(notes) == 1 and "the late policy counts from grading.yml's" in notes[0]


@pytest.mark.parametrize("data, said", [
    ("{not json", "could not be read"),
    ([1, 2], "could not be read"),
    ({"created_at": "yesterday"}, "created_at: 'yesterday' is not a date and time"),
    ({"created_at": "2026-12-15T10:00:00", "users": "x"}, "has no time zone"),
])
def test_unreadable_metadata_grades_without_those_dates_and_says_why(tmp_path, data, said):
    dates, notes = submission_dates(metadata(tmp_path, data), None)
    assert dates.created_at is None and any(said in note for note in notes), notes
