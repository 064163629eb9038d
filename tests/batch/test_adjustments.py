"""A TA's overrides and extensions on a graded class (real batches, a real SQLite gradebook):
kept with who, when and why, listed in the history, applied in every export and in the
overview; an extension moves that student's due date for the late policy of batch grading."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from course_class import DUE, Course
from test_overview import browser  # noqa: F401 - the module's Chromium, a fixture

from autograder.batch.adjustments import extend, override
from autograder.batch.driver import BatchError, batch, history
from autograder.batch.gradebook import Gradebook
from autograder.grading.late import late_status
from autograder.project.assignment import load_assignment
from autograder.project.late_policy import parse_timestamp
from autograder.project.paths import Project

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

AUTOGRADER = Path(sys.executable).parent / "autograder"


def copy_of(course: Course, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(course.out, out)
    return out


def csv_rows(path: Path, key: str) -> dict[str, dict]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        return {row[key]: row for row in csv.DictReader(handle)}


def grades(out: Path) -> dict[str, dict]:
    return csv_rows(out / "grades.csv", "sid")


def canvas(out: Path) -> dict[str, str]:
    """The Canvas import's score of each student (by SIS User ID: the sid)."""
    return {sid: row["Toy assignment"]
            for sid, row in csv_rows(out / "canvas_grades.csv", "SIS User ID").items() if sid}


def test_an_override_is_in_every_export_with_who_when_and_why(course, tmp_path, browser):  # noqa: F811
    out = copy_of(course, tmp_path)
    before = grades(out)["s004"]
    assert (before["total"], before["raw_total"], before["late_penalty_pct"]) == \
        ("8", "10", "20")  # right, but two started days late
    done = override(out, "toy", "s004", "regrade request #3: divide was right", score=9.5,
                    by="ta.kim", project=course.project)
    assert (done.adjustment.kind, done.adjustment.score, done.adjustment.by) == \
        ("override", 9.5, "ta.kim")
    assert any("written again" in note for note in done.notes)
    after = grades(out)
    assert after["s004"]["total"] == "9.5" and after["s004"]["raw_total"] == before["raw_total"]
    assert "regrade request #3" in after["s004"]["override"]
    assert "by ta.kim" in after["s004"]["override"]
    assert after["s001"]["total"] == "10" and after["s001"]["override"] == ""
    assert canvas(out)["s004"] == "9.5"
    # The overview marks it beside the graded total.
    browser.open((out / "index.html").as_uri())
    rows = browser.js("""return [...document.querySelectorAll('#student-table tbody tr')]
                         .map((tr) => tr.innerText);""")
    (carol,) = [r for r in rows if "Carol Diaz" in r]
    assert "override Carol Diaz: 9.5 (regrade request #3: divide was right)" in carol
    assert "8 / 10" in carol
    # The class's numbers count the score in force, as the exports do.
    totals = list({row["submission"]: float(row["total"]) for row in after.values()
                   if row["total"]}.values())  # one per submission, as the overview counts
    mean = browser.js("return document.querySelector('#stat-mean').innerText;")
    assert mean.split(" / ")[0] == f"{statistics.fmean(totals):.2f}".rstrip("0").rstrip("."), \
        (mean, totals)
    # The history lists it, with who and when; clearing it is one more entry.
    override(out, "toy", "s004", "the regrade was of the wrong student", clear=True,
             by="ta.kim", project=course.project)
    (entry,) = history(out, "s004")
    assert [(a.kind, a.score, a.reason) for a in entry.adjustments] == [
        ("override", 9.5, "regrade request #3: divide was right"),
        ("override", None, "the regrade was of the wrong student")]
    assert all(a.at.endswith("+00:00") and a.by == "ta.kim" for a in entry.adjustments)
    assert grades(out)["s004"]["total"] == "8" and canvas(out)["s004"] == "8"


def test_an_override_of_one_group_member_leaves_the_other_and_survives_a_regrade(
        course, tmp_path):
    out = copy_of(course, tmp_path)
    override(out, "toy", "s003", "academic integrity: 0 by the committee's decision", score=0,
             project=course.project)
    rows = grades(out)
    assert (rows["s003"]["total"], rows["s002"]["total"]) == ("0", "10")
    # Mallory's group is flagged: held back from Canvas until a TA decides, and the override
    # is that decision (Bob's score stays held back).
    assert canvas(out)["s003"] == "0" and "s002" not in canvas(out)
    summary = batch(course.export, "toy", out, only=["s003"], force=True,
                    project=course.project, progress=False)
    assert summary.graded == 1
    assert grades(out)["s003"]["total"] == "0"  # a regrade does not undo a TA's decision
    (entry,) = history(out, "s003")
    assert len(entry.runs) == 2 and [a.kind for a in entry.adjustments] == ["override"]


def test_an_extension_moves_the_students_due_date_for_the_late_policy(course, tmp_path):
    out = copy_of(course, tmp_path)
    spec = load_assignment("toy", course.project)
    until = "2026-12-17T12:00:00+00:00"
    done = extend(out, "toy", "s004", "medical note", until=until, project=course.project)
    assert done.adjustment.until == until
    assert "regrades s004's submission" in done.notes[0]
    assert grades(out)["s004"]["late_penalty_pct"] == "20"  # applied by grading, next batch
    summary = batch(course.export, "toy", out, project=course.project, progress=False)
    assert (summary.graded, summary.skipped) == (1, 3)  # only Carol's late status changed
    with Gradebook(out / "gradebook.sqlite") as book:
        (carol,) = book.latest(["submission_3"])
    # The late policy's own answer for the extended due date: on time.
    expected = late_status(carol.submission.created_at, parse_timestamp(until), spec.config.late)
    assert (carol.late.penalty, carol.late.minutes_late) == (expected.penalty, 0) == (0, 0)
    row = grades(out)["s004"]
    assert (row["late_penalty_pct"], row["minutes_late"], row["total"]) == ("0", "0", "10")
    report = json.loads((out / "reports" / "s004" / "report.json").read_text())
    assert report["late"]["penalty"] == 0
    (entry,) = history(out, "s004")
    assert [a.describe().split(" (by")[0] for a in entry.adjustments] == [
        f"due date extended to {until}: medical note"]
    # Cleared: the next batch grades it late again.
    extend(out, "toy", "s004", "granted by mistake", clear=True, project=course.project)
    batch(course.export, "toy", out, project=course.project, progress=False)
    assert grades(out)["s004"]["late_penalty_pct"] == "20"


def test_an_extension_of_a_student_on_time_moves_the_day_their_results_are_shown(course,
                                                                                  tmp_path):
    """Dave submitted on time: no penalty moves, but his results (the key) must stay hidden
    until his own due date's late period ends, while he may still resubmit."""
    out = copy_of(course, tmp_path)

    def shown_at() -> datetime:
        report = json.loads((out / "reports" / "s005" / "report.json").read_text())
        return parse_timestamp(report["release"]["results_shown_at"])

    before = shown_at()
    extend(out, "toy", "s005", "family emergency", until="2026-12-16T23:59:00Z",
           project=course.project)
    summary = batch(course.export, "toy", out, project=course.project, progress=False)
    assert (summary.graded, summary.skipped) == (1, 3)  # Dave's, and only his
    assert shown_at() - before == timedelta(days=2)
    assert grades(out)["s005"]["late_penalty_pct"] == "0"
    (entry,) = history(out, "s005")
    assert "results shown from another date (an extension?)" in entry.runs[-1].why
    again = batch(course.export, "toy", out, project=course.project, progress=False)
    assert again.graded == 0  # current now


def test_an_extension_before_the_student_is_graded_applies_when_they_are(course, tmp_path):
    out = tmp_path / "fresh"
    done = extend(out, "toy", "s004", "known in advance", until="2026-12-20T00:00:00Z",
                  project=course.project)
    assert "applies when their submission is graded" in done.notes[0]
    batch(course.export, "toy", out, only=["s004"], project=course.project, progress=False)
    assert grades(out)["s004"]["late_penalty_pct"] == "0"


@pytest.mark.parametrize("call, message", [
    (lambda out, cfg: override(out, "toy", "nobody", "x", score=1, project=Project.of_config(cfg)),
     "no submission of 'nobody'"),
    (lambda out, cfg: override(out, "toy", "s001", "x", score=11, project=Project.of_config(cfg)),
     "--score 11 is not between 0 and toy's total, 10"),
    (lambda out, cfg: override(out, "toy", "s001", "  ", score=5, project=Project.of_config(cfg)),
     "--reason is required"),
    (lambda out, cfg: override(out, "toy", "s001", "x", score=5, clear=True,
                               project=Project.of_config(cfg)),
     "either a score (--score) or --clear"),
    (lambda out, cfg: extend(out, "toy", "s001", "x", until="2026-12-20 10:00",
                             project=Project.of_config(cfg)), "has no time zone"),
    (lambda out, cfg: extend(out, "toy", "s001", "x", until=DUE, project=Project.of_config(cfg)),
     "is not after toy's due date"),
])
def test_bad_adjustments_are_refused_and_change_nothing(course, tmp_path, call, message):
    out = copy_of(course, tmp_path)
    with pytest.raises(BatchError) as info:
        call(out, course.config)
    assert message in str(info.value)
    with Gradebook(out / "gradebook.sqlite") as book:
        assert book.adjustments() == []


def test_the_commands_are_a_thin_face_over_the_same_calls(course, tmp_path):
    out = copy_of(course, tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(AUTOGRADER), *args, "-o", str(out), "-a", "toy",
                               "--config", str(course.config)],
                              capture_output=True, text=True, timeout=120)

    done = run("override", "s001", "--score", "8", "--reason", "late regrade", "--by", "prof")
    assert done.returncode == 0, done.stderr
    assert "s001: score overridden to 8: late regrade (by prof" in done.stdout
    assert grades(out)["s001"]["total"] == "8"
    extended = run("extend", "s005", "--until", "2026-12-18T00:00:00Z", "--reason", "flu")
    assert extended.returncode == 0 and "autograder batch" in extended.stdout
    refused = run("override", "s001", "--reason", "no score")
    assert refused.returncode == 2 and "either a score" in refused.stderr
    shown = subprocess.run([str(AUTOGRADER), "history", "s001", "-o", str(out)],
                           capture_output=True, text=True, timeout=60)
    assert "s001: score overridden to 8: late regrade (by prof" in shown.stdout


def test_a_version_2_gradebook_gains_the_adjustments_and_keeps_its_runs(course, tmp_path):
    out = copy_of(course, tmp_path)
    path = out / "gradebook.sqlite"
    with Gradebook(path) as book:
        runs = book.run_count()
        book.db.execute("DROP TABLE adjustments")
        book.db.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    with Gradebook(path) as book:
        assert book.run_count() == runs and book.get_meta("schema_version") == "3"
        book.adjust("override", "s001", "after the upgrade", "ta", score=1.0)
        assert list(book.in_force("override")) == ["s001"]
        assert json.loads(book.get_meta("class_outputs"))["detail"] is False
