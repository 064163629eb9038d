"""Every coding test's cause is decided where it happened, and what reads it never reads the
message: graded for real on the toy course, whose hidden tests word their failures as they like.

- The blank toy (bare `raise NotImplementedError` everywhere, some caught by a scenario, one by
  the test itself) is `blank`, whatever its tests' messages say, and those messages say which
  exception it was (no "raised NotImplementedError: " with nothing after it).
- Wrong results whose messages quote every phrase statuses were once searched for (the stub's
  "NotImplementedError ... is not implemented yet", "timed out after", "the grading process
  was killed"...) stay wrong results: status `ok`, no flag, no "not implemented yet" entry.
- A student's own exception class named NotImplementedError is not the built-in one.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from toy_course import toy_course

from autograder.batch.submission_status import derive
from autograder.grading.grade import grade_loaded
from autograder.grading.report import gradescope_results
from autograder.grading.results import Report

# Every phrase submission_status, the report and the overview used to look for in messages.
OLD_WORDS = ("scale raised NotImplementedError: scale is not implemented yet; your module has "
             "no function named 'scale'; your module could not be imported: SyntaxError; timed "
             "out after 3 s; the submission's total time limit ran out; importing your module "
             "took longer than 8 s; your code was killed by SIGKILL; your code exited with "
             "status 1; the grading process was killed during this test; its parent process "
             "ended after your code ran in it; sent back an unreadable reply; the result was "
             "too large to check; is not allowed in the sandbox; the grader could not run this "
             "check; not run: scale did not finish within 3 s in an earlier test")

HIDDEN = f'''
import torch

from autograder.testing import raises_student

import probes


def test_add(student):
    """add: adds two integers"""
    assert student.add(2, 3) == 5, "zebra"


def test_add_in_a_scenario(student):
    """add: adds inside a scenario"""
    report = student.probe(probes.add_caught, 2, 3)
    assert report.get("value") == 5, "the scenario did not go as planned"


def test_divide_by_zero(student):
    """divide: refuses a zero divisor"""
    with raises_student("ZeroDivisionError", "quietly"):
        student.divide(1, 0)


def test_scale(student):
    """scale: doubles a tensor"""
    out = student.probe(probes.scale_caught, torch.arange(3.0))
    assert "error" not in out and torch.equal(out["value"], torch.arange(3.0) * 2), (
        {OLD_WORDS!r})
'''

PROBES = '''
try:
    from agsandbox.caught import note
except ImportError:  # the trusted side
    def note(exc):
        pass


def _attempt(fn, *args):
    try:
        return {"value": fn(*args)}
    except Exception as exc:
        note(exc)
        return {"error": type(exc).__name__}


def add_caught(mod, a, b):
    return _attempt(mod.add, a, b)


def scale_caught(mod, x):
    return _attempt(mod.scale, x)
'''

SUBMISSIONS = {
    "blank": "def add(a, b):\n    raise NotImplementedError\n\n\n"
             "def divide(a, b):\n    raise NotImplementedError\n\n\n"
             "def scale(x):\n    raise NotImplementedError()\n",
    "wrong": "def add(a, b):\n    return a - b\n\n\n"
             "def divide(a, b):\n    return 0\n\n\n"
             "def scale(x):\n    return x * 3\n",
    "own_class": "class NotImplementedError(Exception):\n    pass\n\n\n"
                 "def add(a, b):\n    raise NotImplementedError('add is not implemented yet')\n\n\n"
                 "def divide(a, b):\n    raise NotImplementedError('not yet')\n\n\n"
                 "def scale(x):\n    raise NotImplementedError('not yet')\n",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Report, Path]]:
    base = tmp_path_factory.mktemp("causes")
    toy = toy_course(base / "course", HIDDEN, probes=PROBES)

    def grade_one(name: str) -> tuple[Report, Path]:
        folder = base / "submissions" / name
        folder.mkdir(parents=True)
        (folder / "toy.py").write_text(SUBMISSIONS[name])
        return grade_loaded(folder, toy, base / "out" / name), base / "out" / name

    with ThreadPoolExecutor(2) as pool:  # gradings wait on subprocesses: threads overlap
        return dict(zip(SUBMISSIONS, pool.map(grade_one, SUBMISSIONS), strict=True))


def coding(report: Report) -> dict[str, tuple[str, str]]:
    return {t.name: (t.cause, t.message) for t in report.tests if t.part == "coding"
            and t.status != "excluded"}


def test_the_blank_toy_is_blank_whatever_its_tests_say(graded) -> None:
    report, _ = graded["blank"]
    causes = coding(report)
    assert {cause for cause, _ in causes.values()} == {"not_implemented"}, causes
    # Raised into the test, caught by the test (raises_student) and caught by a scenario whose
    # test says only "the scenario did not go as planned": all told by the exception's class.
    assert causes["add: adds inside a scenario"][1] == "the scenario did not go as planned"
    assert causes["add: adds two integers"][1].startswith("add raised NotImplementedError (")
    for _, message in causes.values():  # a bare raise still says what it was
        assert message.strip() and not message.rstrip().endswith(":"), message
        assert ": (" not in message and ":  " not in message, message
    status = derive(report)
    assert (status.status, status.flags) == ("blank", [])
    shown = [t["name"] for t in gradescope_results(report)["tests"] if "2." in t["number"]]
    assert shown == ["add: not implemented yet", "divide: not implemented yet",
                     "scale: not implemented yet"]


def test_a_wrong_result_that_quotes_every_old_phrase_is_a_wrong_result(graded) -> None:
    report, out = graded["wrong"]
    causes = coding(report)
    assert {cause for cause, _ in causes.values()} == {"wrong_result"}, causes
    assert causes["scale: doubles a tensor"][1] == OLD_WORDS
    status = derive(report)
    assert status.to_json() == {"status": "ok", "detail": "", "flags": [], "timed_out": 0,
                                "crashed": 0, "grader_errors": 0}
    shown = [t["name"] for t in gradescope_results(report)["tests"]]
    assert not any("not implemented yet" in name for name in shown)
    assert "scale: doubles a tensor" in shown
    assert "not implemented yet" not in (out / "report.md").read_text().replace(OLD_WORDS, "")


def test_a_class_named_not_implemented_error_is_not_the_stub(graded) -> None:
    report, _ = graded["own_class"]
    causes = coding(report)
    assert causes["add: adds two integers"] == (
        "raised", "add raised NotImplementedError: add is not implemented yet (line 6 in add)")
    assert causes["add: adds inside a scenario"][0] == "wrong_result"  # not noted as the stub
    assert causes["divide: refuses a zero divisor"][0] == "wrong_result"  # (raises_student's)
    status = derive(report)
    assert status.status == "ok"

