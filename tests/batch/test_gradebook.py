"""The gradebook's status column: recorded with each run, read back with the latest runs and
the history, and derived for the runs of a version-1 gradebook when it is first opened."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from report_records import a_report, a_test

from autograder.batch.gradebook import _SCHEMA, SCHEMA_VERSION, Gradebook, GradebookError
from autograder.batch.records import ClassSubmission, GradeOutcome, Submitter
from autograder.batch.submission_status import SubmissionStatus
from autograder.grading.results import LateEntry, ReleaseRecord, Report
from autograder.project.late_policy import parse_timestamp

SYNTAX = "your module could not be imported: SyntaxError: expected ':' (toy.py, line 1)"


def report(status: str, message: str = "", cause: str | None = None, **more: object) -> Report:
    """A report of one coding test, 'add: adds'."""
    return a_report(a_test("add", status, cause, message, name="add: adds"), **more)


def before_causes(report: Report) -> str:
    """`report` as a grader stored it before tests had causes (version 1, say)."""
    data = report.to_json()
    for test in data["tests"]:
        del test["cause"]
    return json.dumps(data)


def submission(key: str = "alice") -> ClassSubmission:
    return ClassSubmission(key, Path("x"), [Submitter("Alice", "s1", "a@x")])


def test_status_is_recorded_and_read_back(tmp_path):
    with Gradebook(tmp_path / "g.sqlite") as book:
        book.record(submission(), "toy", GradeOutcome("alice", report("failed", SYNTAX,
                                                                     cause="import_failed"),
                                                      None, 1.0), "h1", "g", "a", None)
        flagged = SubmissionStatus("flagged", "tried the network (refused)",
                                   ["tried the network (refused)"])
        book.record(submission(), "toy", GradeOutcome("alice", PASSED,
                                                      None, 1.0), "h2", "g", "a", None, flagged)
        latest = book.latest()[0]
        assert latest.status == flagged
        runs = book.history("alice")
        assert [r.status.status for r in runs] == ["not_importable", "flagged"]
        assert runs[0].tests == {"add: adds": ("failed", 0.0)}
        assert book.keys_of("s1") == book.keys_of("alice") == ["alice"]
        assert book.keys_of("nobody") == []


GRADER_BUG = "the grader could not run this check (KeyError: 'typo')"
PASSED = report("passed")
BUGGED = report("failed", GRADER_BUG, cause="grader_error")


def test_a_run_the_grader_failed_on_in_whole_or_in_part_is_graded_again(tmp_path):
    with Gradebook(tmp_path / "g.sqlite") as book:
        def current() -> bool:
            return book.is_current("alice", "h", "g", "a", None, None)

        book.record(submission(), "toy", GradeOutcome("alice", PASSED,
                                                      None, 1.0), "h", "g", "a", None)
        assert current()
        book.record(submission(), "toy", GradeOutcome("alice", BUGGED,
                                                      None, 1.0), "h", "g", "a", None)
        status = book.latest()[0].status
        assert (status.status, status.grader_errors, status.grader_failed) == \
            ("grader_error", 1, True)
        assert not current()
        # Flagged as well: still a check the grader could not run.
        flagged = SubmissionStatus("flagged", "tried the network (refused)",
                                   ["tried the network (refused)"], grader_errors=1)
        book.record(submission(), "toy", GradeOutcome("alice", BUGGED,
                                                      None, 1.0), "h", "g", "a", None, flagged)
        assert book.latest()[0].status == flagged and not current()
        book.record(submission(), "toy", GradeOutcome("alice", None, "the runner died", 1.0),
                    "h", "g", "a", None)
        assert not current()
        wrong = report("failed", "add(2, 3) should be 5", cause="wrong_result")
        book.record(submission(), "toy", GradeOutcome("alice", wrong, None, 1.0),
                    "h", "g", "a", None)
        assert current()  # the student's own failure


def test_a_run_that_withheld_results_now_due_is_graded_again(tmp_path):
    """As Gradescope's "Regrade all submissions" after the due date: students' files of a run
    graded before it withheld the multiple choice; a batch run after it grades them again."""
    def withheld(shown_at: str, count: int = 1) -> Report:
        return report("passed", release=ReleaseRecord(
            "2026-12-01T00:00:00+00:00", shown_at, count, count, 3.0))

    with Gradebook(tmp_path / "g.sqlite") as book:
        for shown_at, count, current in (("2999-01-01T00:00:00+00:00", 1, True),
                                         ("2020-01-01T00:00:00+00:00", 1, False),
                                         ("2020-01-01T00:00:00+00:00", 0, True)):
            book.record(submission(), "toy", GradeOutcome("alice", withheld(shown_at, count),
                                                          None, 1.0), "h", "g", "a", None)
            assert book.is_current("alice", "h", "g", "a", None,
                                   parse_timestamp(shown_at)) is current, shown_at
        # Graded for another release date (an extension moved it): not current.
        assert not book.is_current("alice", "h", "g", "a", None,
                                   parse_timestamp("2020-01-02T00:00:00+00:00"))


def test_a_version_1_gradebook_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    old_schema = re.sub(r"\n\s*status TEXT +-- JSON[^\n]*", "", _SCHEMA.replace("report TEXT,",
                                                                         "report TEXT "))
    assert "SubmissionStatus" not in old_schema
    db.executescript(old_schema)
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.execute("INSERT INTO submissions VALUES ('bob', NULL, ?)",
               (json.dumps([{"name": "Bob", "sid": "s2", "email": ""}]),))
    for content, text, error in (("h1", before_causes(report("failed", SYNTAX)), None),
                                 ("h2", None, "the grader failed: boom")):
        db.execute("INSERT INTO runs (submission_key, assignment, content_hash, grader_version, "
                   "assignment_version, graded_at, seconds, worker, error, report) VALUES "
                   "('bob', 'toy', ?, 'g', 'a', '2025-01-01T00:00:00+00:00', 1, 'w', ?, ?)",
                   (content, error, text))
    db.commit()
    db.close()
    with Gradebook(path) as book:
        assert [r.status.status for r in book.history("bob")] == \
            ["not_importable", "grader_error"]
        assert book.latest()[0].status.status == "grader_error"
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == \
        str(SCHEMA_VERSION)
    db.close()
    with Gradebook(path) as book:  # opened again: nothing left to migrate
        assert len(book.history("bob")) == 2


def test_a_newer_gradebook_is_refused(tmp_path):
    path = tmp_path / "new.sqlite"
    Gradebook(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(GradebookError, match="schema version 99"):
        Gradebook(path)


def test_a_run_keeps_the_report_as_report_json_and_reads_it_back_typed(tmp_path):
    graded = a_report(a_test("add", "failed", "wrong_result", "add(2, 3) should be 5",
                             output="printed", feedback=["a hint"]),
                      late=LateEntry(5.0, 1, 0.1, "late", 0.0))
    with Gradebook(tmp_path / "g.sqlite") as book:
        book.record(submission(), "toy", GradeOutcome("alice", graded, None, 1.0),
                    "h", "g", "a", None)
        stored = book.db.execute("SELECT report FROM runs").fetchone()[0]
        assert stored == json.dumps(graded.to_json())  # report.json's content, as before
        assert book.latest()[0].report == graded


def test_a_report_stored_before_causes_reads_back_with_the_causes_its_statuses_imply(tmp_path):
    # Its message says what a failed import once said: the cause comes from the status alone.
    old = a_report(a_test("add", "failed", message="your module could not be imported: X"),
                   a_test("sub", "passed"), a_test("q1", "failed", part="multiple_choice"))
    with Gradebook(tmp_path / "g.sqlite") as book:
        book.record(submission(), "toy", GradeOutcome("alice", old, None, 1.0),
                    "h", "g", "a", None)
        book.db.execute("UPDATE runs SET report=?", (before_causes(old),))
        causes = [t.cause for t in book.latest()[0].report.tests]
    assert causes == ["wrong_result", "passed", "answered"]
