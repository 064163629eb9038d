"""`python check.py` as a student runs it: from the unzipped student zip, with a real pytest run.

The zip is built exactly as `autograder release` builds dist/dp_basics-student.zip (same
functions), into a temporary folder, so the tests never touch the repository's dist/.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from autograder import student_check
from autograder.assignment import load_assignment
from autograder.markers import reference
from autograder.multiple_choice import INVALID, grade_answers
from autograder.release import Project, key_answers, student_files, write_zip

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = load_assignment("dp_basics")
REFERENCE = reference(ASSIGNMENT.solution.read_text())


@pytest.fixture(scope="module")
def student_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dist") / "dp_basics-student.zip"
    write_zip(student_files(ASSIGNMENT, Project().torch_requirement()), "dp_basics/", path)
    return path


@pytest.fixture
def unzipped(student_zip: Path, tmp_path: Path) -> Path:
    with zipfile.ZipFile(student_zip) as archive:
        archive.extractall(tmp_path)
    return tmp_path / "dp_basics"


def run_check(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "check.py", *args], cwd=folder, capture_output=True,
                          text=True, timeout=300)


def test_reference_with_valid_answers_passes(unzipped: Path) -> None:
    (unzipped / "dp_basics.py").write_text(REFERENCE)
    (unzipped / "answers.yml").write_text(yaml.safe_dump(key_answers(ASSIGNMENT.bank)))
    result = run_check(unzipped)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "20 of 20 questions answered" in result.stdout
    assert "public tests: ok - 20 of 20 passed" in result.stdout
    assert "All checks passed" in result.stdout
    assert not list(unzipped.rglob("__pycache__")), "check.py leaves no caches behind"


def test_blank_template_fails_naming_what_is_not_implemented(unzipped: Path) -> None:
    result = run_check(unzipped)
    assert result.returncode == 1
    assert "0 of 20 passed" in result.stdout
    line = next(x for x in result.stdout.splitlines() if "not implemented yet:" in x)
    for function in ("wrap_data_parallel", "data_parallel_chunk_sizes", "load_state_dict_flexible"):
        assert function in line
    assert "not answered yet (scores 0 as it is): none" in result.stdout


def test_malformed_answers_fail_naming_each_question(unzipped: Path) -> None:
    (unzipped / "dp_basics.py").write_text(REFERENCE)
    (unzipped / "answers.yml").write_text(
        "q01: b\n"                 # fine: letters are case-insensitive
        "q02: [B, C]\n"    # one-answer question, two letters
        "q03: E\n"              # not an option
        "q14: AB\n"                # select-all question given as text
        "q15: [A, A]\n"            # repeated letter
        "Q01: A\n"                               # typo in the id (ids are case-sensitive)
        "q06: B\n"
        "q06: C\n")                  # answered twice
    result = run_check(unzipped)
    assert result.returncode == 1
    out = result.stdout
    assert "Q2 q02: takes exactly one letter from A-D" in out
    assert 'Q3 q03: "E" is not one of the options A-D' in out
    assert "Q14 q14: select all that apply: give a list of letters, e.g. [A, B]" \
        in out
    assert "Q15 q15: lists A more than once" in out
    assert "unknown question id 'Q01' (did you mean 'q01'?)" in out
    assert "Q6 q06: answered more than once (line 7 and line 8)" in out
    assert "Q1 q01" not in out
    assert "public tests: ok - 20 of 20 passed" in out  # the code is still checked
    assert "6 problem(s)" in out


def test_yaml_syntax_error_names_the_line(unzipped: Path) -> None:
    (unzipped / "answers.yml").write_text("q01: B\nq11: [A\n")
    result = run_check(unzipped, "--no-tests")
    assert result.returncode == 1
    assert "answers.yml line 3, column 1: not valid YAML" in result.stdout


def test_syntax_error_in_the_module_is_reported_and_tests_are_not_run(unzipped: Path) -> None:
    (unzipped / "dp_basics.py").write_text("def wrap_data_parallel(model)\n    return model\n")
    result = run_check(unzipped)
    assert result.returncode == 1
    assert "dp_basics.py line 1" in result.stdout and "SyntaxError" in result.stdout
    assert "not run: fix dp_basics.py first" in result.stdout


def test_check_py_needs_only_its_requirements(unzipped: Path) -> None:
    """No import of the autograder package: the zip carries everything check.py needs."""
    tree = ast.parse((unzipped / "check.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    assert imported - set(sys.stdlib_module_names) <= {"yaml", "jsonschema"}
    requirements = (unzipped / "requirements.txt").read_text().lower()
    for package in ("pyyaml", "jsonschema", "pytest", "torch==", "numpy"):
        assert package in requirements
    assert json.loads((unzipped / "answers.schema.json").read_text())["properties"]


def test_autograder_check_fills_in_schema_and_public_tests_for_a_bare_folder(
        tmp_path: Path) -> None:
    (tmp_path / "dp_basics.py").write_text(REFERENCE)
    (tmp_path / "answers.yml").write_text("q01: B\nq11: [B, C]\n")
    result = subprocess.run([sys.executable, "-m", "autograder.cli", "check", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Q11 q11: takes exactly one letter" in result.stdout
    assert "public tests: ok - 20 of 20 passed" in result.stdout


# The same verdicts as the grader, without the key: an answer check.py accepts is one the grader
# grades (right or wrong), and one it rejects is one the grader marks invalid.
ANSWERS = {
    "q01": ["b", " B ", ["C"], "E", ["B", "C"], 3, True, "BC", "", [], None],
    "q14": [["A", "B"], "a", "AB", ["A", "A"], ["Z"], [1], {"A": 1}, [], "A, B"],
}


@pytest.mark.parametrize(("qid", "value"),
                         [(q, v) for q, values in ANSWERS.items() for v in values])
def test_check_agrees_with_the_grader_on_validity(tmp_path: Path, qid: str, value: object) -> None:
    answers = tmp_path / "answers.yml"
    answers.write_text(yaml.safe_dump({qid: value}))
    graded = {r.id: r for r in grade_answers(ASSIGNMENT.bank, answers).results}[qid]
    shutil.copy(ROOT / "schemas" / "answers.schema.json", tmp_path / "answers.schema.json")
    section = student_check.check_answers(tmp_path, tmp_path / "answers.schema.json")
    assert bool(section.problems) == (graded.status == INVALID), (section.problems, graded)
