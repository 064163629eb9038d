"""`autograder release-feedback` on a graded class that has everything staff keep to themselves
(a flagged group, a similar pair, an override with its reason, an extension, a TA's file in a
report folder): the released tree holds the students' report files and nothing else."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from course_class import graded_course

from autograder.batch.adjustments import extend, override
from autograder.batch.driver import BatchError
from autograder.batch.feedback import GRADE_FILE, RELEASE_MARK, release_feedback
from autograder.batch.gradebook import Gradebook
from autograder.batch.similarity import load_similarity
from autograder.grading.report import REPORT_FILES
from autograder.grading.ta_events import TA_EVENTS_FILE

AUTOGRADER = Path(sys.executable).parent / "autograder"
RELEASED = sorted([*REPORT_FILES, GRADE_FILE])
SIDS = {"s001", "s002", "s003", "s004", "s005"}
REASON = "committee decision 2026-17: copied from s001"


@pytest.fixture
def staffed(course, tmp_path) -> Path:
    """A copy of the course's OUT with an override, an extension and a TA's note added."""
    out = tmp_path / "out"
    shutil.copytree(course.out, out)
    override(out, "toy", "s004", REASON, score=0, project=course.project)
    extend(out, "toy", "s005", "a medical note from the clinic", until="2026-12-20T00:00:00Z",
           project=course.project)
    (out / "reports" / "s003" / "ta-notes.txt").write_text("talk to Mallory about the socket")
    return out


def staff_only(out: Path) -> list[str]:
    """Texts that only staff may see, from this class's own staff outputs."""
    with Gradebook(out / "gradebook.sqlite") as book:
        flagged = [row.status.detail for row in book.latest()
                   if row.status.status == "flagged"]
        adjustments = [a.reason for a in book.adjustments()]
    pairs = load_similarity(out).pairs
    assert flagged and pairs and len(adjustments) == 2  # the class has each kind
    return [*flagged, *adjustments, "flagged", "similar", "override", "203.0.113.9",
            "talk to Mallory", TA_EVENTS_FILE, "left_running", *(p.page for p in pairs)]


def test_the_released_tree_holds_only_the_students_report_files(staffed, tmp_path):
    to = tmp_path / "release"
    done = release_feedback(staffed, to)
    assert set(done.students) == SIDS and done.notes == []
    assert {p.name for p in to.iterdir()} == SIDS | {RELEASE_MARK}
    for sid in SIDS:
        released = to / sid
        assert sorted(p.name for p in released.iterdir()) == RELEASED
        for name in REPORT_FILES:  # the very files grading wrote for that student
            assert (released / name).read_bytes() == \
                (staffed / "reports" / sid / name).read_bytes()
    forbidden = staff_only(staffed)
    overview = html.unescape((staffed / "index.html").read_text(encoding="utf-8"))
    assert all(word in overview for word in forbidden[:2])  # staff do see them
    for path in to.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8").casefold()
            found = [word for word in forbidden if word.casefold() in text]
            assert not found, (path, found)


def test_the_released_grade_is_what_every_export_gives_without_the_reason(staffed, tmp_path):
    """Every result shown (the toy's questions are `visible`): grade.json holds the score of
    grades.csv, the override for the student who has one, marked as adjusted, no reason."""
    release_feedback(staffed, tmp_path / "release")
    with Gradebook(staffed / "gradebook.sqlite") as book:
        exported = {s.sid: row.final_score(s.sid) for row in book.latest()
                    for s in row.submission.submitters}
    for sid in SIDS:
        text = (tmp_path / "release" / sid / GRADE_FILE).read_text()
        grade = json.loads(text)
        assert grade["score"] == exported[sid] and grade["adjusted"] == (sid == "s004"), grade
        assert REASON not in text
    assert exported["s004"] == 0


def test_before_the_due_date_the_released_grade_holds_no_total(tmp_path):
    """Questions withheld until the due date: the reports count the coding part alone, and
    grade.json holds no total, the override's neither (a total the questions count in tells the
    key), and says when it is given; the TA is told the override waits."""
    withheld = graded_course(tmp_path / "withheld", questions="after_due_date")
    override(withheld.out, "toy", "s001", "regrade request", score=7.5,
             project=withheld.project)
    done = release_feedback(withheld.out, tmp_path / "release")
    for sid in SIDS:
        grade = json.loads((tmp_path / "release" / sid / GRADE_FILE).read_text())
        assert grade["score"] is None and grade["adjusted"] is None, grade
        assert "once every result is shown" in grade["note"]
    assert done.notes == ["s001: the override is not shown yet (their reports count the coding "
                          "part alone until the due date; release again after the regrade)"]


def test_what_grading_writes_for_a_student_is_exactly_the_released_files(course):
    # One list of student files (report.REPORT_FILES): what a batch publishes for each student.
    for sid in SIDS:
        assert sorted(p.name for p in (course.out / "reports" / sid).iterdir()) == \
            sorted(REPORT_FILES)


def test_a_release_replaces_the_last_one_and_never_a_folder_it_did_not_make(staffed, tmp_path):
    to = tmp_path / "release"
    release_feedback(staffed, to)
    (to / "s999").mkdir()  # a student no longer in the class
    release_feedback(staffed, to)
    assert {p.name for p in to.iterdir()} == SIDS | {RELEASE_MARK}
    foreign = tmp_path / "documents"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("mine")
    with pytest.raises(BatchError, match="not an earlier release"):
        release_feedback(staffed, foreign)
    assert (foreign / "thesis.tex").read_text() == "mine"
    with pytest.raises(BatchError, match="a folder of its own"):
        release_feedback(staffed, staffed / "reports" / "feedback")
    with pytest.raises(BatchError, match="no gradebook"):
        release_feedback(tmp_path / "nothing", to)
    with pytest.raises(BatchError, match="holds toy, not dp_basics"):
        release_feedback(staffed, to, "dp_basics")


def test_release_feedback_command(staffed):
    done = subprocess.run([str(AUTOGRADER), "release-feedback", "-o", str(staffed), "-a", "toy"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"{staffed / 'feedback'}: feedback for 5 student(s), one folder each" in done.stdout
    assert sorted(p.name for p in (staffed / "feedback" / "s001").iterdir()) == RELEASED
