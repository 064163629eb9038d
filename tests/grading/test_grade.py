"""Grading one submission end to end on a toy assignment: real runner, sandboxes and reports."""

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from repo_project import REPO

from autograder.grading.grade import grade
from autograder.project.paths import Project
from autograder.project.schemas import validate

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

TOY = Path(__file__).parents[1] / "fixtures" / "toy"
GOOD = (TOY / "submissions" / "good" / "toy.py").read_text()
ANSWERS = "sum_shape: A\nfloat_types: [A, C]\n"


def submit(tmp_path: Path, source: str | None = GOOD, answers: str | None = ANSWERS,
           name: str = "toy.py") -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    if source is not None:
        (folder / name).write_text(textwrap.dedent(source))
    if answers is not None:
        (folder / "answers.yml").write_text(answers)
    return folder


def run(tmp_path: Path, folder: Path):
    out = tmp_path / "out"
    report = grade(folder, "toy", out, Project.of_config(TOY / "grading.yml"))
    results = json.loads((out / "results.json").read_text())
    validate(results, "gradescope_results.schema.json", "results.json", REPO.schemas)
    validate(json.loads((out / "report.json").read_text()), "report.schema.json", "report.json",
             REPO.schemas)
    assert (out / "report.md").read_text() and (out / "report.html").read_text()
    return report, results, {t.name: t for t in report.tests}


def test_correct_submission_gets_full_marks(tmp_path):
    report, results, tests = run(tmp_path, submit(tmp_path))
    assert report.score == report.max_score == 10  # the GPU test is left out, the rest reweighted
    assert [p.score for p in report.parts] == [2, 8]
    assert tests["scale: keeps a CUDA tensor on its GPU"].status == "excluded"
    # The excluded GPU test is one note, not a box; the others are scaled by 8/7 and shown in
    # hundredths that add up: 1.14 + 1.14 + 1.15 (add), 2.29 + 1.14 (divide), 1.14 (scale).
    assert results["score"] == 10 and len(results["tests"]) == 8
    assert any("need a GPU" in w for w in report.warnings)
    coding = [t for t in results["tests"] if t["tags"][0] == "coding"]
    assert all(round(t["max_score"], 2) == t["max_score"] for t in coding)
    assert round(sum(t["max_score"] for t in coding), 2) == 8
    assert round(sum(t["score"] for t in results["tests"]), 2) == results["score"]
    assert [(f.name, f.score, f.max_score) for f in report.functions] == [
        ("add", 3.43, 3.43), ("divide", 3.43, 3.43), ("scale", 1.14, 1.14)]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| `add` | 3.43 | 3.43 |" in md and "keeps a CUDA tensor" not in md


def test_missing_answers_file_scores_zero_there_but_code_is_graded(tmp_path):
    report, _, tests = run(tmp_path, submit(tmp_path, answers=None))
    assert [p.score for p in report.parts] == [0, 8]
    assert "no answers file" in tests["Q1 sum_shape"].message


def test_syntax_error_fails_every_coding_test_with_the_reason(tmp_path):
    report, _, tests = run(tmp_path, submit(tmp_path, "def add(a, b)\n    return a + b\n"))
    assert [p.score for p in report.parts] == [2, 0]
    coding = [t for t in report.tests if t.part == "coding" and t.status == "failed"]
    assert len(coding) == 6
    assert all("could not be imported: SyntaxError" in t.message and "line 1" in t.message
               for t in coding)


def test_missing_module_is_named(tmp_path):
    report, _, tests = run(tmp_path, submit(tmp_path, name="solution.py"))
    assert report.parts[1].score == 0
    assert "no toy.py found in your submission (found: solution.py)" in \
        tests["add: adds two integers"].message


def test_renamed_upload_is_graded_with_a_warning(tmp_path):
    report, _, _ = run(tmp_path, submit(tmp_path, name="toy (1).py"))
    assert report.score == 10
    assert any("'toy (1).py' was graded as toy.py" in w for w in report.warnings)


def test_single_nested_folder_is_entered(tmp_path):
    outer = tmp_path / "upload"
    (outer / "hw").mkdir(parents=True)
    (outer / "hw" / "toy.py").write_text(GOOD)
    (outer / "hw" / "answers.yml").write_text(ANSWERS)
    report, _, _ = run(tmp_path, outer)
    assert report.score == 10 and any("inside the folder 'hw'" in w for w in report.warnings)


HOSTILE = GOOD + """
import os, signal, sys


def add(a, b):
    class Equal:
        def __eq__(self, other):
            return True
    return Equal()

def divide(a, b):
    if b == 0:
        os._exit(0)
    return a / b

def scale(x):
    # The grandparent is the trusted runner (the parent is the sandbox's zygote).
    stat = open(f"/proc/{os.getppid()}/stat").read()
    os.kill(int(stat.rsplit(")", 1)[1].split()[1]), signal.SIGKILL)
"""


def test_hostile_functions_lose_only_their_own_tests(tmp_path, monkeypatch):
    # Without isolation the student can reach (and kill) the runner; grading must survive it.
    monkeypatch.setenv("AUTOGRADER_UNSAFE_NO_ISOLATION", "1")
    report, results, tests = run(tmp_path, submit(tmp_path, HOSTILE))
    assert tests["add: adds two integers"].status == "failed"
    assert "cannot check" in tests["add: adds two integers"].message
    assert tests["divide: divides"].status == "passed"
    assert "exited with status 0 during divide" in \
        tests["divide: raises ZeroDivisionError for a zero divisor"].message
    assert "grading process was killed" in tests["scale: doubles a tensor"].message
    assert report.parts[1].score == 2.29  # only "divides" passed: 2 * 8 / 7, in hundredths
    assert len(results["tests"]) == 8


def test_with_isolation_the_runner_is_out_of_reach(tmp_path):
    report, _, tests = run(tmp_path, submit(tmp_path, HOSTILE))
    if report.environment.isolation == "none":
        pytest.skip("no isolation on this machine")
    assert tests["scale: doubles a tensor"].status == "failed"
    assert "grading process was killed" not in tests["scale: doubles a tensor"].message
    assert tests["divide: divides"].status == "passed"


def test_killing_the_parent_process_is_contained(tmp_path):
    source = GOOD + "\nimport os\ndef add(a, b):\n    os.kill(os.getppid(), 9)\n" \
                    "    os.kill(os.getpid(), 9)\n"
    report, _, tests = run(tmp_path, submit(tmp_path, source))
    # Killing the parent ends the worker (PDEATHSIG); in a PID namespace the parent, PID 1,
    # shrugs the signal off and the worker's own suicide ends it. Either way: only add fails.
    assert [t.status for t in report.tests if t.item == "add"] == ["failed"] * 3
    assert any(text in tests["add: adds two integers"].message
               for text in ("sandbox's parent process was killed", "killed by SIGKILL"))
    assert [t.status for t in report.tests if t.item in ("divide", "scale")] == \
        ["passed"] * 3 + ["excluded"]


def test_infinite_loop_and_sys_exit_are_contained(tmp_path):
    source = GOOD + "\nimport sys\ndef add(a, b):\n    while True:\n        pass\n" \
                    "\ndef scale(x):\n    sys.exit('bye')\n"
    report, _, tests = run(tmp_path, submit(tmp_path, source))
    assert "timed out after 3 s during add" in tests["add: adds two integers"].message
    assert "sys.exit('bye')" in tests["scale: doubles a tensor"].message
    assert tests["divide: divides"].status == "passed"


def test_student_output_is_shown_when_configured(tmp_path):
    source = GOOD + "\ndef scale(x):\n    print('debug!' * 2000)\n    return x * 2\n"
    _, _, tests = run(tmp_path, submit(tmp_path, source))
    output = tests["scale: doubles a tensor"].output
    assert output.startswith("debug!") and "[output cut at 4 KiB]" in output


def test_reports_hold_feedback_but_never_hidden_test_source(tmp_path):
    folder = submit(tmp_path, GOOD.replace("a + b", "a - b"), "sum_shape: B\nfloat_types: [A]\n")
    run(tmp_path, folder)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "That is sum(1)." in md and "sum(0) removes dimension 0." in md
    assert "add(2, 3) should be 5" in md
    assert "def test_" not in md and "probes." not in md


def test_pending_gpu_policy_scores_gpu_tests_zero_until_a_regrade(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    config = course / "grading.yml"
    config.write_text(config.read_text().replace("rank_retries: 0",
                                                 "rank_retries: 0\n    gpu_policy: pending"))
    out = tmp_path / "out"
    report = grade(submit(tmp_path), "toy", out, Project.of_config(config))
    gpu = next(t for t in report.tests if t.name == "scale: keeps a CUDA tensor on its GPU")
    if report.environment.gpus:
        pytest.skip("this machine has a GPU")
    assert (gpu.status, gpu.score, gpu.max_score) == ("pending", 0.0, 1.0)
    assert report.score == 9 and report.max_score == 10
    assert any("pending a regrade on a GPU grader" in w for w in report.warnings)
    assert "pending" in (out / "report.md").read_text()


def test_grading_uses_the_strongest_isolation_this_machine_supports(tmp_path):
    from autograder.sandbox.isolation import detect

    report, _, _ = run(tmp_path, submit(tmp_path))
    assert report.environment.isolation == detect().mode
    assert report.environment.protections == detect().protections


def test_a_sandbox_that_cannot_start_is_a_grading_error_with_no_report(tmp_path,
                                                                       sandbox_cannot_start):
    """The grader's failure: no report (so no score and no "your code failed" for any test),
    and GradingError, which `autograder grade` turns into exit 2 (Gradescope's fallback)."""
    from autograder.grading.supervisor import GradingError

    out = tmp_path / "out"
    with pytest.raises(GradingError, match="^the sandbox could not start: the isolation "
                                           "launcher failed: "):
        grade(submit(tmp_path), "toy", out, Project.of_config(sandbox_cannot_start))
    assert not (out / "results.json").exists() and not (out / "report.json").exists()


def test_multiple_choice_right_or_wrong_after_the_due_date_problems_at_once(tmp_path):
    """grading.yml's default: per-question correctness `after_due_date` (resubmissions would
    give the key away), unanswered and malformed answers `visible`. Without a due date the
    right or wrong answers wait (tests/grading/test_visibility.py: before and after one)."""
    course = tmp_path / "course"
    shutil.copytree(TOY, course)
    config = course / "grading.yml"
    config.write_text(config.read_text().replace(", visibility: visible}", "}"))
    out = tmp_path / "out"
    # sum_shape right, float_types malformed (one letter of a select-all list is fine: "Z" not)
    report = grade(submit(tmp_path, answers="sum_shape: A\nfloat_types: [Z]\n"), "toy", out,
                   Project.of_config(config))
    results = json.loads((out / "results.json").read_text())
    visibility = {t["name"]: t["visibility"] for t in results["tests"]}
    assert visibility["Q1 sum_shape"] == "after_due_date"
    assert visibility["Q2 float_types"] == "visible"
    # The full score counts the right answer; what the student sees counts only the coding.
    assert report.score == 9 and results["visibility"] == "visible" and results["score"] == 8
    malformed = next(t for t in results["tests"] if t["name"] == "Q2 float_types")
    assert not malformed["output"].startswith("Q2 float_types")  # the heading is not repeated
    assert malformed["output"].splitlines()[1:] == []  # the key waits, as the answer's result
    md = (out / "report.md").read_text()
    assert "### Q2 float\\_types (0 / 1)" in md and "Q1 sum\\_shape" not in md
    assert "Which answers are right is shown after the due date (none is set yet)" in md
    assert "| Multiple choice | 0 of 1 shown so far (1 more not counted yet) | 2 |" in md
