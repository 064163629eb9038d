"""A worker's outcome crosses to the batch as plain JSON and is typed again on arrival
(autograder.batch.records.GradeOutcome): the same report comes out as went in, and anything
else is the worker's failure, never an exception of the batch."""

from __future__ import annotations

import json

import pytest
from report_records import a_report, a_test

from autograder.batch.local_workers import _outcome
from autograder.batch.records import GradeOutcome, GradeTask
from autograder.grading.results import LateEntry
from autograder.inputs.submission import GradedFile

REPORT = a_report(a_test("add", "failed", "import_failed", "your module could not be imported",
                         output="printed", feedback=["a hint"]),
                  a_test("q1", "passed", part="multiple_choice"),
                  late=LateEntry(5.0, 1, 0.1, "late", 1.0),
                  graded_file=GradedFile("toy.ipynb", "the only notebook"))
TASK = GradeTask("alice", "in", "out", "toy", "grading.yml")


@pytest.mark.parametrize("outcome", [
    GradeOutcome("alice", REPORT, None, 1.5, "host:1"),
    GradeOutcome("alice", None, "the grader failed: boom", 0.5, "host:1")])
def test_an_outcome_round_trips_through_json(outcome):
    sent = json.dumps(outcome.to_json())
    assert GradeOutcome.from_json(json.loads(sent)) == outcome
    assert _outcome(TASK, sent.encode()) == outcome


def test_the_report_crosses_as_report_json_has_it():
    assert GradeOutcome("alice", REPORT, None, 1.0).to_json()["report"] == REPORT.to_json()


@pytest.mark.parametrize("line", [
    b"not json", b"[]", b'{"key": "alice"}',
    json.dumps({**GradeOutcome("alice", REPORT, None, 1.0).to_json(),
                "report": {"tests": "not a list"}}).encode(),
    json.dumps({**GradeOutcome("alice", REPORT, None, 1.0).to_json(),
                "report": {k: v for k, v in REPORT.to_json().items() if k != "score"}}).encode()])
def test_an_unreadable_answer_is_the_workers_failure(line):
    outcome = _outcome(TASK, line)
    assert (outcome.key, outcome.report, outcome.error) == (
        "alice", None, "the grading worker sent an unreadable answer")


def test_a_report_with_keys_this_version_lacks_is_read_without_them():
    # (a worker of a newer grader, as a stored report of one: Report.from_json)
    line = json.dumps({**GradeOutcome("alice", REPORT, None, 1.0).to_json(),
                       "report": {**REPORT.to_json(), "unknown": 1}}).encode()
    assert _outcome(TASK, line) == GradeOutcome("alice", REPORT, None, 1.0)


def test_an_answer_for_another_task_is_refused():
    line = json.dumps(GradeOutcome("bob", REPORT, None, 1.0).to_json()).encode()
    assert _outcome(TASK, line).error == "the grading worker answered for another task"
