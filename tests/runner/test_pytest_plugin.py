"""autograder.runner.pytest_plugin: what a hidden suite may declare, and what each ending of a
test becomes for the student.

Through the real runner (collect_hidden_tests, run_hidden_tests) on small assignments built from
the toy: collection validation lists every problem of a broken suite at once, as one "invalid
hidden tests" GradingError; markers and docstrings become the specs the report uses; and every
way a test can end (pass, the author's assertion, pytest's rewritten detail, fail, skip, a
grader bug, no submission, no GPU, memory) maps to the status and message the student sees.
Hangs and `uses`/`tolerant` at run time are tests/grading/test_hangs.py's; clipping and the
memory limit are tests/runner/test_runner_limits.py's.
"""

from __future__ import annotations

import pytest

from autograder.grading.supervisor import GradingError, collect_hidden_tests, run_hidden_tests
from autograder.inputs.submission import SubmissionFiles

BROKEN = '''
import pytest


def test_no_docstring(student):
    pass


def test_unknown_function(student):
    """multiply: is not part of the assignment"""


def test_no_colon(student):
    """add adds two numbers"""


@pytest.mark.weight(-1)
def test_negative_weight(student):
    """add: weighs less than nothing"""


@pytest.mark.points("two")
def test_text_weight(student):
    """divide: weighs a word"""


@pytest.mark.visibility("secret")
def test_bad_visibility(student):
    """divide: is shown to nobody"""


@pytest.mark.visibility("hidden")
def test_hidden_with_points(student):
    """divide: counts, and is shown to nobody"""


@pytest.mark.visibility("after_published")
@pytest.mark.weight(0)
def test_published_worth_nothing(student):
    """divide: worth nothing, shown when the grades are published"""


@pytest.mark.uses("add", "nope")
def test_uses_unknown(student):
    """divide: calls a function that does not exist"""


@pytest.mark.weight(0)
def test_worth_nothing(student):
    """scale: the only test of scale, worth nothing"""


def test_add_valid(student):
    """add: a valid test among broken ones"""


def test_divide_valid(student):
    """divide: another"""
'''


def test_every_problem_of_a_broken_suite_is_listed_at_once(assignment, tmp_path):
    with pytest.raises(GradingError) as caught:
        collect_hidden_tests(assignment(BROKEN), tmp_path)
    message = str(caught.value)
    assert message.startswith("invalid hidden tests:\n  - ")
    problems = message.split("\n  - ")[1:]
    expected = [
        ("test_no_docstring", "needs a docstring whose first line names the test"),
        ("test_unknown_function", "display name 'multiply: is not part of the assignment' "
                                  "must start with one of ['add', 'divide', 'scale']"),
        ("test_no_colon", "display name 'add adds two numbers' must start with one of"),
        ("test_negative_weight", "@pytest.mark.weight(w) needs a number w >= 0"),
        ("test_text_weight", "@pytest.mark.points(w) needs a number w >= 0"),
        ("test_bad_visibility", "visibility 'secret' is not one of ('hidden', "
                                "'after_due_date', 'after_published', 'visible')"),
        ("test_hidden_with_points", "visibility 'hidden' on a test worth points: students' "
                                    "totals count only what they are shown"),
        ("test_uses_unknown", "@pytest.mark.uses('nope') names no function of"),
        (None, "grading.yml gives scale 2 points, but it has no hidden test with a weight "
               "above 0"),
    ]
    assert len(problems) == len(expected), problems
    for problem, (test, text) in zip(problems, expected, strict=True):
        if test is not None:
            assert problem.startswith(f"test_hidden.py::{test}: "), problem
        assert text in problem, problem


@pytest.mark.parametrize(("hidden", "expected"), [
    ("import pytest\n\n@pytest.mark.no_such_marker\ndef test_a(student):\n    '''add: a'''\n",
     "'no_such_marker' not found in `markers` configuration option"),
])
def test_a_suite_that_cannot_be_collected_is_the_instructors_problem(assignment, tmp_path,
                                                                     hidden, expected):
    with pytest.raises(GradingError) as caught:
        collect_hidden_tests(assignment(hidden), tmp_path)
    assert "the hidden tests could not be collected: test_hidden.py" in str(caught.value)
    assert expected in str(caught.value)


DECLARED = '''
import pytest


@pytest.mark.weight(2)
def test_add_twice(student):
    """add: weighs two"""


@pytest.mark.points(1)
@pytest.mark.visibility("visible")
def test_add_once(student):
    """add: weighs one, shown at once"""


@pytest.mark.weight(0)
@pytest.mark.timeout_s(3)
def test_add_free(student):
    """add: worth nothing, three seconds"""


@pytest.mark.uses("add", "scale", "add")
@pytest.mark.tolerant
def test_divide(student):
    """divide: uses add and scale

    More lines of the docstring are not part of the name."""


@pytest.mark.gpu(2)
def test_scale(student):
    """scale : on two GPUs"""
'''


def test_markers_and_docstrings_become_the_specs(assignment, tmp_path):
    # The coding part's visibility in grading.yml: after_due_date (the schema's is visible; a
    # part worth points is shown either at once or after the due date).
    made = assignment(DECLARED, {"show_student_output: true":
                                 "show_student_output: true\n        visibility: after_due_date"})
    specs = collect_hidden_tests(made, tmp_path)
    by_name = {s["name"]: s for s in specs}
    assert [s["nodeid"].split("::")[1] for s in specs] == \
        ["test_add_twice", "test_add_once", "test_add_free", "test_divide", "test_scale"]
    # add's 3 points (grading.yml) split 2:1:0 by weight; divide's and scale's to their one test.
    assert [by_name[n]["points"] for n in ("add: weighs two", "add: weighs one, shown at once",
                                           "add: worth nothing, three seconds")] == [2, 1, 0]
    divide, scale = by_name["divide: uses add and scale"], by_name["scale : on two GPUs"]
    assert divide["points"] == 3 and scale["points"] == 2
    assert scale["function"] == "scale" and scale["gpu"] and not divide["gpu"]
    assert divide["uses"] == ["divide", "add", "scale"] and divide["tolerant"]
    assert by_name["add: weighs two"]["uses"] == ["add"] and \
        not by_name["add: weighs two"]["tolerant"]
    # Visibility: the test's own, else the coding part's in grading.yml.
    assert by_name["add: weighs one, shown at once"]["visibility"] == "visible"
    assert by_name["add: weighs two"]["visibility"] == "after_due_date"
    # Time: the test's own timeout_s, else grading.yml's timeouts.test (8 s for the toy).
    assert by_name["add: worth nothing, three seconds"]["timeout"] == 3
    assert by_name["add: weighs two"]["timeout"] == 8


REPEATED = '''
import pytest


@pytest.mark.parametrize("n, expected", [(2, 4), (3, 9)])
def test_add_square(student, n, expected):
    """add: squares"""


def test_add_once(student):
    """add: once"""


def test_divide(student):
    """divide: once"""


def test_scale(student):
    """scale: once"""
'''


def test_tests_that_share_a_name_are_numbered_without_their_ids(assignment, tmp_path):
    # A parametrized test's cases share its docstring: each report row and grade-sheet column
    # needs its own name, and pytest's ids ("2-4") would show the expected values.
    specs = collect_hidden_tests(assignment(REPEATED), tmp_path)
    assert [s["name"] for s in specs] == ["add: squares (1 of 2)", "add: squares (2 of 2)",
                                          "add: once", "divide: once", "scale: once"]


ENDINGS = '''
import pytest


def test_passes():
    """add: passes"""


def test_author_message():
    """add: the author's message"""
    secret = [3, 1, 4]
    assert sum(secret) == 9, "the sum of the hidden list is wrong"


def test_rewritten_detail():
    """add: pytest's detail would show hidden values"""
    hidden_input = 31415926
    assert hidden_input + 1 == 27182818


def test_fail():
    """add: pytest.fail"""
    pytest.fail("failed on purpose")


def test_skip():
    """divide: skipped"""
    pytest.skip("not today")


def test_grader_bug():
    """divide: the grader's own bug"""
    {}["missing key"]


def test_memory():
    """divide: a result too large"""
    raise MemoryError()


def test_needs_the_submission(student):
    """scale: calls the student"""
    student.scale(1)


@pytest.mark.gpu(2)
def test_two_gpus():
    """scale: needs two GPUs"""
'''


def test_every_ending_of_a_test_becomes_a_status_and_a_message(assignment, tmp_path):
    import torch

    made = assignment(ENDINGS)
    files = SubmissionFiles(tmp_path / "upload", None, "no toy.py found in your submission",
                            None, [])
    suite = run_hidden_tests(made, files, tmp_path)
    outcomes, warnings, environment = suite.outcomes, suite.warnings, suite.environment
    seen = {o.name.split(": ", 1)[1]: (o.status, o.message) for o in outcomes}
    assert seen["passes"] == ("passed", "")
    assert seen["the author's message"] == ("failed", "the sum of the hidden list is wrong")
    # The rewritten `assert` would quote the hidden input: only a generic line is shown.
    assert seen["pytest's detail would show hidden values"] == \
        ("failed", "a check of this behaviour failed")
    assert seen["pytest.fail"] == ("failed", "failed on purpose")
    assert seen["skipped"] == ("skipped", "not today")
    assert seen["the grader's own bug"] == \
        ("grader_error", "the grader could not run this check (KeyError: 'missing key')")
    assert seen["a result too large"] == \
        ("failed", "the result was too large to check (the grader ran out of memory reading it)")
    assert seen["calls the student"] == ("failed", "no toy.py found in your submission")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        assert seen["needs two GPUs"] == \
            ("gpu_unavailable", f"needs 2 GPUs; this grader has {gpus or 'none'}")
    else:
        assert seen["needs two GPUs"] == ("passed", "")
    assert "31415926" not in str(outcomes) and "hidden_input" not in str(outcomes)
    assert warnings == []
    assert environment["gpus"] == gpus
