"""`autograder release`, `release --check` and `verify-key`, run as an instructor runs them.

The committed dp_basics template is checked against its sources (what CI relies on). The
self-check, which grades for real, runs on a copy of the toy fixture course with a solution and
public tests added, where one grading takes ~3 s instead of ~15.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import yaml
from repo_project import REPO

from autograder.project.assignment import load_assignment
from autograder.project.markers import strip_solutions
from autograder.project.question_bank import render_answers_schema
from autograder.release.build import (
    STUDENT_REQUIREMENTS,
    answers_template,
    student_files,
    torch_requirement,
    write_zip,
)

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "fixtures" / "toy"
ASSIGNMENT = load_assignment("dp_basics", REPO)
TORCH = torch_requirement(REPO)

TOY_SOLUTION = '''\
"""Toy assignment: three small functions."""


def add(a, b):
    """a + b, without modifying a."""
    ### BEGIN SOLUTION
    return a + b
    ### END SOLUTION


def divide(a, b):
    """a / b; ZeroDivisionError when b is 0."""
    ### BEGIN SOLUTION
    return a / b if b else 1 // 0
    ### END SOLUTION


def scale(x):
    """x doubled."""
    ### BEGIN SOLUTION
    return x * 2
    ### END SOLUTION
'''


def autograder(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def toy_course(base: Path, solution: str = TOY_SOLUTION) -> Path:
    """A course folder: the toy fixture plus a solution with markers and public tests."""
    course = base / "course"
    shutil.copytree(TOY, course, ignore=shutil.ignore_patterns("__pycache__"))
    toy = course / "assignments" / "toy"
    (toy / "solution").mkdir()
    (toy / "solution" / "toy.py").write_text(solution)
    public = toy / "tests" / "public"
    public.mkdir()
    (public / "conftest.py").write_text(
        "import sys\nfrom pathlib import Path\n\n"
        "sys.path.insert(0, str(Path(__file__).resolve().parents[1]))\n")
    (public / "test_public.py").write_text("import toy\n\n\ndef test_add():\n"
                                           "    assert toy.add(1, 2) == 3\n")
    return course


# ----------------------------------------------------------------------------- --check (CI)


def test_committed_student_templates_are_up_to_date() -> None:
    """What CI and the before-stop hook run: fails when a source changed without a release."""
    result = autograder("release", "--check")
    assert result.returncode == 0, result.stderr
    assert "student templates up to date: dp_basics" in result.stdout


def test_check_lists_each_differing_file_and_writes_nothing(tmp_path: Path) -> None:
    course = toy_course(tmp_path)
    config = str(course / "grading.yml")
    assert autograder("release", "toy", "--skip-self-check", "--config", config).returncode == 0
    template = course / "student_templates" / "toy"
    (template / "answers.yml").write_text("sum_shape: A\n")
    (template / "tests" / "test_public.py").unlink()
    (template / "notes.txt").write_text("stale")
    before = {p: p.read_bytes() for p in template.rglob("*") if p.is_file()}

    result = autograder("release", "--check", "--config", config)

    assert result.returncode == 1
    assert "student_templates/toy/answers.yml: differs from what the sources give" in result.stderr
    assert "student_templates/toy/tests/test_public.py: missing" in result.stderr
    assert "student_templates/toy/notes.txt: not generated from the sources" in result.stderr
    assert "3 template file(s) out of date" in result.stderr
    assert {p: p.read_bytes() for p in template.rglob("*") if p.is_file()} == before


# ----------------------------------------------------------------------------- generation


def test_template_files_come_from_the_sources() -> None:
    files = student_files(ASSIGNMENT, TORCH)
    public = ASSIGNMENT.public_tests
    assert sorted(files) == sorted(
        ["README.md", "answers.schema.json", "answers.yml", "check.py", "dp_basics.ipynb",
         "dp_basics.py", "requirements.txt"] + [f"tests/{p.name}" for p in public.glob("*.py")])
    assert files["dp_basics.py"].decode() == strip_solutions(ASSIGNMENT.solution.read_text())
    assert b"### BEGIN SOLUTION" not in files["dp_basics.py"]
    assert files["answers.schema.json"] == render_answers_schema(ASSIGNMENT.bank).encode()
    for path in public.glob("*.py"):
        assert files[f"tests/{path.name}"] == path.read_bytes()
    assert "MODULE = 'dp_basics'" in files["check.py"].decode()
    requirements = files["requirements.txt"].decode().splitlines()
    assert TORCH in requirements and TORCH == "torch==2.13.0"


def test_student_requirements_follow_pyproject() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # no tomllib: Python 3.10 is supported
    for requirement in STUDENT_REQUIREMENTS:
        assert f'"{requirement}",' in pyproject


def test_answers_template_lists_every_question_unanswered_and_no_key() -> None:
    text = answers_template(ASSIGNMENT)
    assert yaml.safe_load(text) == {q.id: None for q in ASSIGNMENT.bank.questions}
    comments = " ".join(line[1:].strip() for line in text.splitlines() if line.startswith("#"))
    comments = re.sub(r"\s+", " ", comments)
    for q in ASSIGNMENT.bank.questions:
        assert f"{q.title} (" in text
        assert " ".join(q.stem.split()[:8]) in comments
        for letter, option in q.options.items():
            assert f"{letter}: {' '.join(option.split()[:5])}" in comments
        if q.code:
            assert all(f"#     {line}".rstrip() in text for line in q.code.splitlines())
        # Hints, explanations and feedback are for after grading: never in what students get.
        for secret in [q.hint, q.explanation, *q.feedback.values()]:
            assert " ".join(secret.split()[:12]) not in comments
    assert "select all that apply" in text and "question_id: [A, C]" in text


def test_student_zip_is_reproducible(tmp_path: Path) -> None:
    files = student_files(ASSIGNMENT, TORCH)
    write_zip(files, "dp_basics/", tmp_path / "a.zip")
    write_zip(files, "dp_basics/", tmp_path / "b.zip")
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        assert archive.namelist() == [f"dp_basics/{name}" for name in sorted(files)]


# ----------------------------------------------------------------------------- self-check


def test_release_with_self_check_writes_template_and_zip(tmp_path: Path) -> None:
    course = toy_course(tmp_path)
    result = autograder("release", "toy", "--config", str(course / "grading.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    for passed in ("points: 2 questions, 7 hidden tests", "public tests pass on the reference",
                   "reference with the full key scores 100%", "template scores 0"):
        assert f"ok: {passed}" in result.stdout
    template = course / "student_templates" / "toy"
    assert 'raise NotImplementedError("add is not implemented yet")' in (
        template / "toy.py").read_text()
    with zipfile.ZipFile(course / "dist" / "toy-student.zip") as archive:
        assert "toy/check.py" in archive.namelist()
    assert autograder("release", "--check", "--config",
                      str(course / "grading.yml")).returncode == 0


def test_self_check_failures_stop_the_release_before_writing(tmp_path: Path) -> None:
    # A wrong reference (divide) and a function outside any solution block (scale): the
    # reference misses points and the template earns some.
    broken = TOY_SOLUTION.replace("return a / b if b else 1 // 0", "return a * b") \
        .replace('    """x doubled."""\n    ### BEGIN SOLUTION\n    return x * 2\n'
                 '    ### END SOLUTION\n', '    """x doubled."""\n    return x * 2\n')
    course = toy_course(tmp_path, broken)
    result = autograder("release", "toy", "--config", str(course / "grading.yml"))
    assert result.returncode == 1
    assert "toy: self-check failed, nothing written" in result.stderr
    assert "the reference solution with the full key scores" in result.stderr
    assert "divide: divides" in result.stderr  # the failing hidden test, by name
    assert "the student template scores" in result.stderr
    assert "these pass on the stubs: scale: doubles a tensor" in result.stderr
    assert not (course / "student_templates").exists() and not (course / "dist").exists()


def test_bank_points_that_do_not_add_up_stop_the_release(tmp_path: Path) -> None:
    course = toy_course(tmp_path)
    bank = course / "assignments" / "toy" / "questions.yml"
    bank.write_text(bank.read_text().replace("points: 1\n", "points: 2\n", 1))
    result = autograder("release", "toy", "--config", str(course / "grading.yml"))
    assert result.returncode == 2  # a configuration error, not a failed check
    assert "add up to 3 points, but grading.yml gives multiple_choice 2" in result.stderr


# ----------------------------------------------------------------------------- verify-key


SNIPPET_QUESTION = """\
- id: {qid}
  source: new
  topic: sums
  stem: What does this print?
  code: print(sum([1, 2]))
  options: {{A: "3", B: "12"}}
  answer: [{answer}]
  multiple: false
  points: 1
  hint: Add.
  explanation: sum adds the numbers.
  feedback: {{{wrong}: "No."}}
  snippet:
    code: print(sum([1, 2]))
    expect:
      no_gpu: {{stdout: "{out}"}}
      one_gpu: {{stdout: "{out}"}}
      multi_gpu: {{stdout: "{out}"}}
"""


def test_verify_key_prints_one_line_per_snippet_question(tmp_path: Path) -> None:
    # dp_basics' own snippets run in tests/assignments/test_dp_basics_snippets.py; here the
    # command's output, on two snippets whose expectations are right and wrong.
    course = toy_course(tmp_path)
    bank = course / "assignments" / "toy" / "questions.yml"
    bank.write_text(bank.read_text() + textwrap.indent(
        SNIPPET_QUESTION.format(qid="sum_right", answer="A", wrong="B", out="3")
        + SNIPPET_QUESTION.format(qid="sum_wrong", answer="B", wrong="A", out="12"), "  "))
    config = course / "grading.yml"
    config.write_text(config.read_text().replace("multiple_choice: {points: 2",
                                                 "multiple_choice: {points: 4")
                      .replace("total: 10", "total: 12"))
    result = autograder("verify-key", "toy", "--config", str(config))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"sum_right\s+no_gpu\s+OK", lines[0])
    assert re.fullmatch(r"sum_wrong\s+no_gpu\s+MISMATCH expected stdout '12', got '3'", lines[1])
    assert lines[-1] == "2 snippet questions, 1 mismatch(es)"


@pytest.mark.parametrize("command", [["release", "nope"], ["verify-key", "nope"]])
def test_unknown_assignment_fails_clearly(command: list[str]) -> None:
    result = autograder(*command)
    assert result.returncode in (1, 2) and "has no assignment 'nope'" in result.stderr


def test_no_gradescope_bundle_from_stale_templates(tmp_path: Path) -> None:
    # Students would get one version of the assignment and Gradescope would grade another.
    course = toy_course(tmp_path)
    config = str(course / "grading.yml")
    assert autograder("release", "-a", "toy", "--skip-self-check", "--config", config) \
        .returncode == 0
    assert autograder("gradescope", "-a", "toy", "--config", config).returncode == 0
    bank = course / "assignments" / "toy" / "questions.yml"
    bank.write_text(bank.read_text().replace("stem: ", "stem: Changed. ", 1))
    stale = autograder("gradescope", "-a", "toy", "--config", config)
    assert stale.returncode == 1
    assert "out of date" in stale.stderr and "autograder release -a toy" in stale.stderr
