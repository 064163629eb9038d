"""The otter-grader dialect of the notebook release (`release --notebook otter`).

The generation tests need no otter. The round trip runs the real otter-grader (the `otter`
extra, `pip install -e '.[otter]'`, which `make` installs): `otter assign` on the generated
master notebook, then `otter run` (otter's grading without docker) on the student notebook
filled with the reference solution, and on one with a broken function, whose messages are
compared with what `autograder check` says about the same code. The two `otter run`s and the
check run at once (~45 s of CPU each for otter's kernel, torch and pytest).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from repo_project import REPO

from autograder.inputs.notebook import extract_module, template_cells
from autograder.project.assignment import load_assignment
from autograder.project.markers import reference, strip_solutions
from autograder.release.build import (
    key_answers,
    student_files,
    torch_requirement,
    write_otter_folder,
)
from autograder.release.otter import (
    MULTIPLE_CHOICE,
    OtterError,
    _definition,
    otter_files,
    otter_solution,
    public_tests_by_function,
)
from autograder.student_files.otter_checks import answers_yaml

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = load_assignment("dp_basics", REPO)
MODULE = ASSIGNMENT.config.module
FUNCTIONS = list(ASSIGNMENT.config.functions)
SOLUTION = ASSIGNMENT.solution.read_text(encoding="utf-8")
REFERENCE = reference(SOLUTION)
STUDENT = student_files(ASSIGNMENT, torch_requirement(REPO))
OTTER = otter_files(ASSIGNMENT, STUDENT)
MASTER = json.loads(OTTER[f"{MODULE}.ipynb"])
BIN = Path(sys.executable).parent
TIMEOUT_S = 600


def source(cell: dict) -> str:
    return "".join(cell["source"])


def questions(notebook: dict) -> dict[str, dict]:
    """{name: config} of the master's `# BEGIN QUESTION` cells, in order."""
    found = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "raw" and source(cell).startswith("# BEGIN QUESTION"):
            config = yaml.safe_load(source(cell).split("\n", 1)[1])
            found[config["name"]] = config
    return found


def solution_lines() -> set[str]:
    """Lines found only inside the reference's solution blocks: none may reach students."""
    inside, lines = False, set()
    for line in SOLUTION.splitlines():
        if line.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"):
            inside = line.strip() == "### BEGIN SOLUTION"
        elif inside and len(line.strip()) > 12:
            lines.add(line.strip())
    stubs = {line.strip() for line in strip_solutions(SOLUTION).splitlines()}
    return lines - stubs


# ----------------------------------------------------------------------------- generation


def test_every_public_test_runs_under_the_question_of_its_function() -> None:
    sources = {n: c.decode() for n, c in OTTER.items()
               if n.startswith("public_tests/") and n.endswith(".py")}
    assert "public_tests/test_public.py" in sources
    checks = json.loads(OTTER["otter_checks.json"])
    tests = checks["tests"]
    assert checks["module"] == MODULE and set(tests) == set(FUNCTIONS)
    public = ast.parse(sources["public_tests/test_public.py"])
    names = {n.name for n in public.body if isinstance(n, ast.FunctionDef)
             and n.name.startswith("test_")}
    assert {t.split("::")[1] for ts in tests.values() for t in ts} == names
    # named after their function; through a fixture only; calling two functions
    assert "test_public.py::test_chunk_sizes_even_split" in tests["data_parallel_chunk_sizes"]
    assert tests["setup_ddp"] == ["test_public.py::test_setup_ddp_single_process"]
    assert tests["wrap_ddp"] == ["test_public.py::test_wrap_ddp_on_cpu"]
    assert "test_public.py::test_cleanup_ddp_destroys_the_group" in tests["cleanup_ddp"]
    assert tests["load_state_dict_flexible"] == [
        "test_public.py::test_load_wrapped_checkpoint_into_plain_model"]


def test_a_public_test_reaching_no_function_stops_the_generation() -> None:
    text = "import m as S\n\n\ndef test_nothing():\n    assert 1\n"
    with pytest.raises(OtterError, match=r"reach no function of m: test_x\.py::test_nothing"):
        public_tests_by_function({"test_x.py": text}, "m", ["f"])
    text = ("import pytest\nfrom m import f as g\n\n\n@pytest.fixture\ndef made():\n"
            "    return g()\n\n\nclass TestIt:\n    def test_uses(self, made):\n"
            "        assert made\n")
    assert public_tests_by_function({"test_x.py": text}, "m", ["f"]) == {
        "f": ["test_x.py::TestIt::test_uses"]}


def test_master_notebook_is_in_otter_assign_format() -> None:
    cells = MASTER["cells"]
    config = source(cells[0])
    assert cells[0]["cell_type"] == "raw" and config.startswith("# ASSIGNMENT CONFIG\n")
    config = yaml.safe_load(config)
    assert config["name"] == "dp_basics" and config["tests"] == {"ok_format": False}
    assert set(config["files"]) <= set(OTTER) | {"public_tests"}
    assert config["student_files"] == ["answers.yml"]
    found = questions(MASTER)
    assert list(found) == [*FUNCTIONS, MULTIPLE_CHOICE]  # module order, then the answers
    for name, points in ASSIGNMENT.config.functions.items():
        assert found[name]["points"] == points
    assert found[MULTIPLE_CHOICE]["points"] == 0  # scored by the grader, which has the key
    by_id = {c["id"]: c for c in cells}
    for name in FUNCTIONS:
        code = source(by_id[name])
        assert by_id[name]["metadata"]["nbgrader"]["solution"] is True
        assert code.count("# BEGIN SOLUTION NO PROMPT") == 1 and code.count("# END SOLUTION") == 1
        assert f'raise NotImplementedError("{name} is not implemented yet")' in code
        assert f"check_function(env, {name!r})" in source(by_id[f"{name}-test"])
        compile(code, name, "exec")  # the master's cell runs: the prompt is a string there
    # The same sources give the same notebook, byte for byte.
    assert otter_files(ASSIGNMENT, STUDENT) == OTTER


def test_nothing_hidden_reaches_the_otter_folder() -> None:
    hidden = set()
    for path in ASSIGNMENT.hidden_tests.glob("test_*.py"):
        hidden |= {n.name for n in ast.walk(ast.parse(path.read_text()))
                   if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    text = "\n".join(c.decode() for c in OTTER.values())
    assert hidden and not [name for name in hidden if re.search(rf"\b{name}\b", text)]
    for q in ASSIGNMENT.bank.questions:  # no hint, explanation or feedback: they give the key
        for secret in [q.hint, q.explanation, *q.feedback.values()]:
            assert secret.strip()[:60] not in text
    answers = next(c for c in MASTER["cells"] if c["id"] == "answers")
    assert source(answers).count(": None,") == len(ASSIGNMENT.bank.questions)
    assert not any(n.startswith(("tests/", "hidden")) for n in OTTER)


def test_module_level_solution_blocks_are_refused() -> None:
    with pytest.raises(OtterError, match="line 1: a solution block at module level"):
        otter_solution("### BEGIN SOLUTION\nHELPER = 1\n### END SOLUTION\n")


def test_release_cli_writes_the_otter_folder_for_instructors_only(tmp_path: Path) -> None:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "fixtures" / "toy", course,
                    ignore=shutil.ignore_patterns("__pycache__"))
    toy = course / "assignments" / "toy"
    (toy / "solution").mkdir()
    body = '    """{doc}"""\n    ### BEGIN SOLUTION\n    return {expr}\n    ### END SOLUTION\n'
    (toy / "solution" / "toy.py").write_text('"""Toy."""\n' + "".join(
        f"\n\ndef {name}(a, b=2):\n" + body.format(doc=name, expr=expr)
        for name, expr in (("add", "a + b"), ("divide", "a / b"), ("scale", "a * 2"))))
    (toy / "tests" / "public").mkdir()
    (toy / "tests" / "public" / "test_public.py").write_text(
        "import toy\n\n\ndef test_add():\n    assert toy.add(1, 2) == 3\n")
    out = tmp_path / "otter"

    def release(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autograder.cli", "release", "toy",
                               "--skip-self-check", "--config", str(course / "grading.yml"),
                               *args], capture_output=True, text=True, timeout=300)

    result = release("--notebook", "otter", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"otter assign {out / 'toy' / 'toy.ipynb'}" in result.stdout
    written = {p.relative_to(out / "toy").as_posix() for p in (out / "toy").rglob("*")
               if p.is_file()}
    assert written == {"toy.ipynb", "otter_checks.py", "otter_checks.json", "check.py",
                       "answers.schema.json", "answers.yml", "requirements.txt",
                       "public_tests/test_public.py"}
    assert json.loads((out / "toy" / "otter_checks.json").read_text())["tests"] == {
        "add": ["test_public.py::test_add"]}
    # The master holds the solution: never in the student template or zip.
    template = {p.name for p in (course / "student_templates" / "toy").rglob("*")}
    assert "otter_checks.py" not in template and "return a + b" not in (
        course / "student_templates" / "toy" / "toy.ipynb").read_text()
    with zipfile.ZipFile(course / "dist" / "toy-student.zip") as archive:
        assert not [n for n in archive.namelist() if "otter" in n]
    # A public test no question would run stops the release before anything is written.
    shutil.rmtree(course / "student_templates")
    (toy / "tests" / "public" / "test_other.py").write_text("def test_nothing():\n    pass\n")
    result = release("--notebook", "otter", "--out", str(tmp_path / "again"))
    assert result.returncode == 1
    assert "toy: no otter notebook" in result.stderr and "test_other.py::test_nothing" in \
        result.stderr
    assert not (course / "student_templates").exists() and not (tmp_path / "again").exists()
    assert release("--out", str(out)).returncode == 2  # --out belongs to --notebook otter


# ----------------------------------------------------------------------------- otter round trip


def otter(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "otter"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def assigned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`otter assign` on the generated master: its output folder (autograder/, student/)."""
    pytest.importorskip("otter", reason="otter-grader is not installed (pip install -e "
                        "'.[otter]', as make does): the otter round trip needs it")
    pytest.importorskip("ipykernel", reason="otter runs notebooks in a Jupyter kernel")
    base = tmp_path_factory.mktemp("otter")
    write_otter_folder(OTTER, base / "master")
    # Its own check of the master (run_tests) would grade once more what the tests below do.
    result = otter("assign", "--no-run-tests", str(base / "master" / f"{MODULE}.ipynb"),
                   str(base / "out"), cwd=base)
    assert result.returncode == 0, result.stdout + result.stderr
    return base / "out"


def filled(student: dict, code: dict[str, str], answers: dict) -> dict:
    """The student notebook with `code` in its function cells and `answers` in the answers cell."""
    notebook = json.loads(json.dumps(student))
    for cell in notebook["cells"]:
        if cell.get("id") in code:
            cell["source"] = code[cell["id"]]
        elif cell.get("id") == "answers":
            text = source(cell)
            for qid, value in answers.items():
                text = text.replace(f"{qid!r}: None,", f"{qid!r}: {value!r},")
            cell["source"] = text
    return notebook


def reference_code() -> dict[str, str]:
    lines = REFERENCE.splitlines(keepends=True)
    code = {}
    for name in FUNCTIONS:
        first, end = _definition(REFERENCE, name)
        code[name] = "".join(lines[first:end])
    return code


BROKEN_CODE = {
    "data_parallel_chunk_sizes": "def data_parallel_chunk_sizes(batch_size, num_devices):\n"
                                 "    return [batch_size]\n",
    "wrap_ddp": "def wrap_ddp(model, device, sync_batchnorm=False):\n"
                "    raise NotImplementedError(\"wrap_ddp is not implemented yet\")\n",
}
BROKEN_ANSWERS = {"q01": "Z", "q03": ["A", "B"]}


@pytest.fixture(scope="module")
def graded(assigned: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """`otter run` on the reference and on the broken notebook, and `autograder check` on the
    broken code, all three at once: {"reference"/"broken": results.json, "check": stdout}."""
    base = tmp_path_factory.mktemp("graded")
    student = json.loads((assigned / "student" / f"{MODULE}.ipynb").read_text())
    key = key_answers(ASSIGNMENT.bank)
    notebooks = {"reference": filled(student, reference_code(), key),
                 "broken": filled(student, {**reference_code(), **BROKEN_CODE},
                                  {**key, **BROKEN_ANSWERS})}
    autograder_zip = next((assigned / "autograder").glob("*.zip"))
    runs = {}
    for label, notebook in notebooks.items():
        folder = base / label
        folder.mkdir()
        (folder / f"{MODULE}.ipynb").write_text(json.dumps(notebook))
        runs[label] = subprocess.Popen(
            [str(BIN / "otter"), "run", "--no-logo", "-a", str(autograder_zip), "-o",
             str(folder), str(folder / f"{MODULE}.ipynb")],
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # What a student of an otter course uploads: the notebook and the answers.yml it wrote.
    submission = base / "submission"
    submission.mkdir()
    (submission / f"{MODULE}.ipynb").write_text(json.dumps(notebooks["reference"]))
    (submission / "answers.yml").write_text(answers_yaml(key))
    grading = subprocess.Popen(
        [sys.executable, "-m", "autograder.cli", "grade", str(submission), "--assignment",
         MODULE, "--out", str(base / "student"), "--staff-out", str(base / "graded")],
        cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    # The broken notebook as this project's grader reads it, and its answers as answers.yml.
    check_dir = base / "check"
    check_dir.mkdir()
    extracted = extract_module(base / "broken" / f"{MODULE}.ipynb", MODULE)
    (check_dir / f"{MODULE}.py").write_text(extracted.source)
    (check_dir / "answers.yml").write_text(answers_yaml({**key, **BROKEN_ANSWERS}))
    check = subprocess.run([sys.executable, "-m", "autograder.cli", "check", str(check_dir)],
                           cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    out: dict[str, object] = {"check": check.stdout, "broken_module": extracted.source}
    for label, process in runs.items():
        log, _ = process.communicate(timeout=TIMEOUT_S)
        results = base / label / "results.json"
        assert results.is_file(), f"otter run ({label}) wrote no results.json:\n{log[-3000:]}"
        out[label] = json.loads(results.read_text())
    log, _ = grading.communicate(timeout=TIMEOUT_S)
    report = base / "graded" / "report.json"  # the full report (--staff-out)
    assert report.is_file(), f"autograder grade wrote no report:\n{log[-3000:]}"
    out["grade"] = json.loads(report.read_text())
    return out


@pytest.mark.slow
def test_otter_assign_gives_a_student_notebook_with_the_stubs_and_no_solution(
        assigned: Path) -> None:
    student_dir = assigned / "student"
    student = json.loads((student_dir / f"{MODULE}.ipynb").read_text())
    by_id = {c.get("id"): c for c in student["cells"]}
    template = {c["id"]: source(c) for c in template_cells(strip_solutions(SOLUTION))}
    for name in FUNCTIONS:  # exactly the nbgrader template's cell: the same stubs
        assert source(by_id[name]) == template[name]
    checks = [source(c) for c in student["cells"] if source(c).startswith("grader.check(")]
    assert checks == [f'grader.check("{q}")' for q in [*FUNCTIONS, MULTIPLE_CHOICE]]
    everything = "\n".join(p.read_text(errors="replace") for p in student_dir.rglob("*")
                           if p.is_file())
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN PROMPT", "BEGIN QUESTION"):
        assert marker not in everything
    code = {line.strip() for c in student["cells"] if c["cell_type"] == "code"
            for line in source(c).splitlines()}
    code |= {line.strip() for test in student["metadata"]["otter"]["tests"].values()
             for line in test.splitlines()}
    assert solution_lines() and not solution_lines() & code
    assert not (student_dir / "answers.yml").exists()  # the notebook writes the student's own
    # This project's grader reads the otter notebook as an nbgrader one: the stubs and imports.
    module = extract_module(student_dir / f"{MODULE}.ipynb", MODULE).source
    assert "import otter" not in module and "grader.check" not in module
    assert ast.dump(ast.parse(module)).count("NotImplementedError") == len(FUNCTIONS)


@pytest.mark.slow
def test_otter_run_passes_every_public_check_on_the_reference(graded: dict) -> None:
    results = graded["reference"]
    scored = {t["name"]: t for t in results["tests"] if "max_score" in t}
    assert set(scored) == {*FUNCTIONS, MULTIPLE_CHOICE}
    failed = {n: t.get("output") for n, t in scored.items() if t["score"] != t["max_score"]
              or "All test cases passed!" not in t.get("output", "")}
    assert not failed
    assert sum(t["score"] for t in scored.values()) == ASSIGNMENT.config.coding.points


@pytest.mark.slow
def test_this_projects_grader_grades_an_otter_notebook_with_full_marks(graded: dict) -> None:
    """The Gradescope bundle's path: hidden suite and key, on what otter's students submit."""
    report = graded["grade"]
    failed = [f"{t['name']}: {t.get('message')}" for t in report["tests"]
              if t["status"] != "passed"]
    assert report["score"] == report["max_score"] == 100, failed
    assert "was converted to dp_basics.py" in (report.get("graded_file") or {}).get("why", "")


@pytest.mark.slow
def test_a_broken_function_fails_its_otter_check_with_the_message_of_autograder_check(
        graded: dict) -> None:
    check = str(graded["check"])
    problems = [line[4:] for line in check.splitlines() if line.startswith("  - ")]
    assert "not implemented yet: wrap_ddp" in problems
    assert any(p.startswith("test_chunk_sizes_even_split: ") for p in problems)
    assert any(p.startswith("Q1 q01: ") for p in problems)
    assert len(problems) == 6, check  # 3 chunk-size tests, wrap_ddp, 2 answers
    outputs = {t["name"]: t.get("output", "") for t in graded["broken"]["tests"]
               if "max_score" in t}

    def question(problem: str) -> str:
        if problem.startswith("test_chunk_sizes_"):
            return "data_parallel_chunk_sizes"
        return "wrap_ddp" if problem.startswith("not implemented yet") else MULTIPLE_CHOICE

    for problem in problems:  # each of check's lines, word for word, under its question
        assert problem in outputs[question(problem)], (problem, outputs[question(problem)])
    failing = {n for n, o in outputs.items() if "All test cases passed!" not in o}
    assert failing == {"wrap_ddp", "data_parallel_chunk_sizes", MULTIPLE_CHOICE}
