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
from repo_project import REPO

from autograder.project.assignment import load_assignment
from autograder.project.markers import reference
from autograder.project.question_bank import render_answers_schema
from autograder.questions.answers import INVALID, grade_answers
from autograder.release.build import key_answers, student_files, torch_requirement, write_zip
from autograder.student_files import check as student_check

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = load_assignment("dp_basics", REPO)
REFERENCE = reference(ASSIGNMENT.solution.read_text())


@pytest.fixture(scope="module")
def student_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dist") / "dp_basics-student.zip"
    write_zip(student_files(ASSIGNMENT, torch_requirement(REPO)), "dp_basics/", path)
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
    out = result.stdout
    assert "not answered yet" not in out and "none" not in out
    assert "no question is answered yet" in out
    assert "graded file: dp_basics.py" in out
    assert "dp_basics.py and dp_basics.ipynb are both the template unchanged" in out


def test_not_implemented_is_read_from_the_code_not_from_messages(unzipped: Path) -> None:
    """Stubs reworded (a bare raise, another message) and one function written: the line names
    exactly the stubs left, and the written function's failure is a failure of its own."""
    module = unzipped / "dp_basics.py"
    source = module.read_text()
    stub = 'raise NotImplementedError("cleanup_ddp is not implemented yet")'
    assert stub in source
    source = source.replace(stub, "raise NotImplementedError").replace(
        "is not implemented yet", "TODO")
    source = source.replace('raise NotImplementedError("wrap_data_parallel TODO")',
                            "raise NotImplementedError('my own helper is missing')  # x = 1\n"
                            "    return model")
    module.write_text(source)
    result = run_check(unzipped)
    line = next(x for x in result.stdout.splitlines() if "not implemented yet:" in x)
    assert "cleanup_ddp" in line and "load_state_dict_flexible" in line
    assert "wrap_data_parallel" not in line, line
    assert any(x.strip().startswith("- test_") and "my own helper is missing" in x
               for x in result.stdout.splitlines()), result.stdout


def test_fresh_template_without_tests_never_says_all_checks_passed(unzipped: Path) -> None:
    result = run_check(unzipped, "--no-tests")
    assert result.returncode == 0, result.stdout  # nothing is wrong ...
    assert "All checks passed" not in result.stdout  # ... but nothing was done or tested
    assert result.stdout.rstrip().endswith(
        "No problems found in what was checked, but not everything is done or checked yet: no "
        "function is implemented yet; no question is answered yet; the public tests were not "
        "run.")


def test_unanswered_questions_are_named_or_all_answered(unzipped: Path) -> None:
    key = key_answers(ASSIGNMENT.bank)
    (unzipped / "dp_basics.py").write_text(REFERENCE)
    (unzipped / "answers.yml").write_text(yaml.safe_dump(
        {q: (None if q in ("q03", "q07") else a) for q, a in key.items()}))
    result = run_check(unzipped, "--no-tests")
    assert "note: not answered yet: q03, q07 (each scores 0 as it is)" in result.stdout
    assert "2 question(s) not answered yet; the public tests were not run." in result.stdout
    (unzipped / "answers.yml").write_text(yaml.safe_dump(key))
    result = run_check(unzipped, "--no-tests")
    assert "20 of 20 questions answered (checked for form only" in result.stdout
    assert "all answered" in result.stdout and "not answered yet" not in result.stdout


def _fill_notebook(folder: Path, helper: str | None = None) -> None:
    functions = {n.name: "".join(REFERENCE.splitlines(keepends=True)[n.lineno - 1:n.end_lineno])
                 for n in ast.parse(REFERENCE).body if isinstance(n, ast.FunctionDef)}
    nb = json.loads((folder / "dp_basics.ipynb").read_text())
    for cell in nb["cells"]:
        meta = cell["metadata"]["nbgrader"]
        if meta["solution"]:
            cell["source"] = functions[meta["grade_id"]]
    if helper:
        nb["cells"].insert(3, {"cell_type": "code", "execution_count": None, "id": "mine",
                               "metadata": {}, "outputs": [], "source": helper})
    (folder / "dp_basics.ipynb").write_text(json.dumps(nb))


def test_notebook_next_to_the_stub_is_checked_as_the_grader_grades_it(unzipped: Path) -> None:
    """The issue's unzipped-folder case: check.py converts the notebook (the grader's own
    code), says it is the graded file and why, names the cell left out, tests the notebook."""
    _fill_notebook(unzipped, "def _strip(x):\n    return x\n")
    (unzipped / "answers.yml").write_text(yaml.safe_dump(key_answers(ASSIGNMENT.bank)))
    result = run_check(unzipped)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "dp_basics.ipynb (graded as dp_basics.py): ok - graded file: dp_basics.ipynb; " \
        "converted as the grader converts it, no syntax errors" in out
    assert "dp_basics.py is still the template's stub (no function implemented), so your " \
        "notebook dp_basics.ipynb was converted to dp_basics.py and graded" in out
    assert "cell 4 (added by you) defines _strip, which was left out: to keep a helper, move " \
        "it into a solution cell" in out
    assert "public tests: ok - 20 of 20 passed" in out
    assert "All checks passed. Submit dp_basics.ipynb and your answers file." in out
    assert (unzipped / "dp_basics.py").read_text() == (ROOT / "student_templates" /
                                                       "dp_basics" / "dp_basics.py").read_text()


def test_both_files_edited_is_said_loudly(unzipped: Path) -> None:
    _fill_notebook(unzipped)
    (unzipped / "dp_basics.py").write_text(REFERENCE)
    out = run_check(unzipped, "--no-tests").stdout
    assert "graded file: dp_basics.py" in out
    assert "BOTH dp_basics.py and dp_basics.ipynb hold code: dp_basics.py was graded and the " \
        "notebook was IGNORED" in out


def test_autograder_check_of_a_notebook_only_folder(tmp_path: Path, unzipped: Path) -> None:
    """`autograder check` on a bare upload (no check.py, tests or schema): the notebook."""
    _fill_notebook(unzipped)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(unzipped / "dp_basics.ipynb", bare / "dp_basics (1).ipynb")
    result = subprocess.run([sys.executable, "-m", "autograder.cli", "check", str(bare)],
                            capture_output=True, text=True, timeout=300)
    out = result.stdout
    assert "graded file: dp_basics (1).ipynb" in out, out + result.stderr
    assert "there is no dp_basics.py, so dp_basics (1).ipynb was converted" in out
    assert "public tests: ok - 20 of 20 passed" in out


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
    (tmp_path / "answers.schema.json").write_text(render_answers_schema(ASSIGNMENT.bank))
    section = student_check.check_answers(tmp_path, tmp_path / "answers.schema.json")
    assert bool(section.problems) == (graded.status == INVALID), (section.problems, graded)
