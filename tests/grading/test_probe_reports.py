"""What `student.probe` and `student.run_ranks` return, through the real runner: a report that
lacks a field a check reads, or holds a value the check cannot use, fails the test as the
student's, with a message naming the field; a bug of the test itself stays a grader error.
(Issue 24: a relabelled class made a dp_basics probe omit a key, and the student was told
"grader error (tell your instructor): KeyError".) The containers themselves:
tests/sandbox/test_reports.py."""

from __future__ import annotations

from autograder.grading.supervisor import run_hidden_tests
from autograder.inputs.submission import locate

PROBES = '''

def rows(mod, n):
    """Row 0 has every field; the others (what student code made, say) lack one."""
    return {"rows": [{"name": "a", "sentinel": True}] + [{"name": "b"}] * (n - 1),
            "output": mod.add(1, 2)}


def echo(mod, value):
    assert type(value) is dict and type(value["rows"]) is list and type(value["rows"][0]) is dict
    return value


def rank_rows(mod, rank, world_size, port):
    return {"value": mod.add(rank, 1) - rank} if rank == 0 else {"other": 1}
'''

HIDDEN = '''
import torch

import probes


def test_missing_field(student):
    """add: a field the scenario's report lacks"""
    report = student.probe(probes.rows, 2)
    for row in report["rows"]:
        assert row["sentinel"] is True, "every row must be converted"


def test_missing_field_of_a_rank(student):
    """add: a field a rank's report lacks"""
    reports = student.run_ranks(probes.rank_rows, 2)
    assert [r["value"] for r in reports] == [1, 1]


def test_unusable_value(student):
    """divide: a value the check cannot use"""
    report = student.probe(probes.rows, 1)
    assert torch.allclose(report["output"], torch.full((1,), 3.0)), "must be three"


def test_own_bug(student):
    """divide: a bug of the test itself"""
    report = student.probe(probes.rows, 1)
    assert report["rows"] and {}["typo"]


def test_well_formed(student):
    """scale: a well-formed report reads as dicts and lists, and goes back in as an argument"""
    report = student.probe(probes.rows, 1)
    assert report == {"rows": [{"name": "a", "sentinel": True}], "output": 3}
    assert isinstance(report, dict) and isinstance(report["rows"], list)
    assert student.probe(probes.echo, report) == report
    (alone,) = student.run_ranks(probes.rank_rows, 1)
    assert alone == {"value": 1} and alone.get("other") is None
'''

WHY = ("your code gave the scenario something it could not describe (an object that is not "
       "what it claims to be, say), so this check could not be made")


def test_a_report_that_lacks_what_a_check_reads_is_the_students_failure(assignment, toy,
                                                                         tmp_path):
    made = assignment(HIDDEN)
    made.probes.write_text(made.probes.read_text() + PROBES)
    outcomes = run_hidden_tests(made, locate(toy / "submissions" / "good", "toy"),
                                tmp_path).outcomes
    seen = {o.name.split(": ", 1)[1]: (o.status, o.message) for o in outcomes}
    assert seen == {
        "a field the scenario's report lacks": (
            "failed", f"the scenario's report has no field 'sentinel' (in rows[1]): {WHY}"),
        "a field a rank's report lacks": (
            "failed", f"rank 1's report has no field 'value': {WHY}"),
        "a value the check cannot use": (
            "failed", f"the scenario's report holds an int at output, which this check cannot "
                      f"use: {WHY}"),
        "a bug of the test itself": (
            "grader_error", "the grader could not run this check (KeyError: 'typo')"),
        "a well-formed report reads as dicts and lists, and goes back in as an argument": (
            "passed", ""),
    }
