"""The notebook flavour of dp_basics: the template notebook, and notebook submissions.

The template notebook is checked against nbformat's schema always and nbgrader's own metadata
validator when nbgrader is installed (`pip install -e '.[notebook]'`, as `make` does). One real
grading (~15 s) shows a notebook holding the reference solution earns full coding marks.
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
import types
from pathlib import Path

import nbformat
import pytest
from repo_project import REPO

from autograder.grading.grade import _submission_files, grade_loaded
from autograder.inputs.notebook import NotebookError, extract_module, template_notebook
from autograder.inputs.submission import GradedFile
from autograder.project.assignment import load_assignment
from autograder.project.markers import reference, strip_solutions
from autograder.release.build import notebook_instructions
from autograder.student_files.check import EDITED, UNTOUCHED, module_state

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = load_assignment("dp_basics", REPO)
MODULE = ASSIGNMENT.config.module
SOLUTION = ASSIGNMENT.solution.read_text(encoding="utf-8")
TEMPLATE = strip_solutions(SOLUTION)
COMMITTED = ROOT / "student_templates" / "dp_basics" / "dp_basics.ipynb"


def generated() -> str:
    return template_notebook(TEMPLATE, lambda doc: notebook_instructions(doc, MODULE))


def notebook() -> dict:
    return json.loads(generated())


def write(folder: Path, name: str, content: dict | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def located(tmp_path: Path, folder: Path):
    return _submission_files(folder, tmp_path / "work" / "upload", MODULE)


def _without_docstring(source: str) -> str:
    tree = ast.parse(source)
    if ast.get_docstring(tree) is not None:
        tree.body.pop(0)
    return ast.dump(tree)


# ----------------------------------------------------------------------------- the template


def test_committed_notebook_is_generated_and_deterministic() -> None:
    text = generated()
    assert text == generated()
    assert COMMITTED.read_text(encoding="utf-8") == text  # `release --check` covers it too


def test_instructions_cell_is_for_the_notebook() -> None:
    """Not "run pytest" (which tests the stub dp_basics.py): check.py, which converts the
    notebook as the grader does; and where helpers go, and which file is graded."""
    text = "".join(notebook()["cells"][0]["source"])
    docstring = ast.get_docstring(ast.parse(TEMPLATE))
    assert "Run the public tests with `pytest`" in docstring
    assert "Run the public tests with `pytest`" not in text
    assert text.startswith(docstring.split("\n\n")[0])
    assert "`python check.py`" in text and "exactly as the grader does" in text
    assert "Cells you add are left out" in text and "inside a function" in text
    assert "grades `dp_basics.py` and ignores the notebook" in text


def test_template_notebook_is_valid_nbformat_written_as_nbformat_writes_it() -> None:
    text = COMMITTED.read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert nbformat.writes(nb) + "\n" == text


def test_template_notebook_passes_nbgrader_metadata_validation() -> None:
    nbgraderformat = pytest.importorskip(
        "nbgrader.nbgraderformat",
        reason="nbgrader is not installed (pip install -e '.[notebook]'): its metadata "
               "validator cannot run; nbformat's schema is still checked")
    nb = nbformat.reads(COMMITTED.read_text(encoding="utf-8"), as_version=4)
    validator = nbgraderformat.MetadataValidator()
    assert validator.schema_version == 3
    validator.validate_nb(nb)
    # Validation must not have needed an upgrade either: the metadata is already v3 as written.
    upgraded = validator.upgrade_notebook_metadata(copy.deepcopy(nb))
    assert upgraded == nb


def test_template_cells_follow_the_module() -> None:
    cells = notebook()["cells"]
    meta = [c["metadata"]["nbgrader"] for c in cells]
    assert cells[0]["cell_type"] == "markdown"
    assert "".join(cells[0]["source"]) == notebook_instructions(
        ast.get_docstring(ast.parse(TEMPLATE)), MODULE)
    assert cells[1]["cell_type"] == "code" and "import torch\n" in cells[1]["source"]
    solutions = [m["grade_id"] for m in meta if m["solution"]]
    assert solutions == list(ASSIGNMENT.config.functions)  # one cell per function, in order
    for cell, m in zip(cells, meta, strict=True):
        assert cell["id"] == m["grade_id"]
        assert m == {"grade": False, "grade_id": m["grade_id"], "locked": not m["solution"],
                     "schema_version": 3, "solution": m["solution"]}
        if m["solution"]:
            assert f"def {m['grade_id']}(" in "".join(cell["source"])
            assert "raise NotImplementedError" in "".join(cell["source"])


def test_template_notebook_extracts_to_the_template_module(tmp_path: Path) -> None:
    extracted = extract_module(COMMITTED, MODULE)
    assert extracted.warnings == []
    # Same code as dp_basics.py, statement for statement (the docstring is the markdown cell).
    assert _without_docstring(extracted.source) == _without_docstring(TEMPLATE)
    module = types.ModuleType(MODULE)
    exec(compile(extracted.source, f"{MODULE}.py", "exec"), module.__dict__)  # our own stubs
    for function in ASSIGNMENT.config.functions:
        stub = getattr(module, function)
        required = [p for p in inspect.signature(stub).parameters.values()
                    if p.default is inspect.Parameter.empty]
        with pytest.raises(NotImplementedError, match=f"{function} is not implemented yet"):
            stub(*[None] * len(required))


# ----------------------------------------------------------------------------- submissions


def _reference_functions() -> dict[str, str]:
    source = reference(SOLUTION)
    lines = source.splitlines(keepends=True)
    return {node.name: "".join(lines[node.lineno - 1:node.end_lineno])
            for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


@pytest.mark.slow
def test_notebook_with_the_reference_solution_gets_full_coding_marks(tmp_path: Path) -> None:
    nb = notebook()
    functions = _reference_functions()
    for cell in nb["cells"]:
        grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        if cell["metadata"]["nbgrader"]["solution"]:
            cell["source"] = functions[grade_id]
    first = next(c for c in nb["cells"] if c["metadata"]["nbgrader"]["solution"])
    first["source"] = "%load_ext autoreload\n!nvidia-smi\n" + first["source"]
    # A cell of the student's own (no nbgrader metadata) is left out: it would fail the import.
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "scratch",
                        "metadata": {}, "outputs": [], "source": "raise SystemExit(1)\n"})
    folder = tmp_path / "submission"
    write(folder, "dp_basics (1).ipynb", nb)  # an upload rename, and no dp_basics.py

    report = grade_loaded(folder, ASSIGNMENT, tmp_path / "out")

    coding = next(p for p in report.parts if p.name == "coding")
    failed = [f"{t.name}: {t.message}" for t in report.tests
              if t.part == "coding" and t.status == "failed"]
    assert coding.score == coding.max_score == 70, failed
    assert report.graded_file == GradedFile(
        "dp_basics (1).ipynb",
        "there is no dp_basics.py, so dp_basics (1).ipynb was converted to dp_basics.py and "
        "graded")
    assert any("'dp_basics (1).ipynb' was graded as dp_basics.ipynb" in w
               for w in report.warnings)
    assert any("`%load_ext autoreload` is an IPython magic" in w for w in report.warnings)
    assert any("`!nvidia-smi` is an IPython magic" in w for w in report.warnings)


def test_notebook_without_solution_cells_is_a_clear_module_problem(tmp_path: Path) -> None:
    nb = notebook()
    for cell in nb["cells"]:
        cell["metadata"] = {}  # as when code is pasted into fresh cells
    files = located(tmp_path, write(tmp_path / "sub", "dp_basics.ipynb", nb).parent)
    assert files.module is None
    assert files.module_problem.startswith(
        "dp_basics.ipynb has no solution cells (cells with nbgrader solution metadata): ")


@pytest.mark.parametrize("content, message", [
    ('{"cells": [', "dp_basics.ipynb is not a valid notebook: it is not valid JSON"),
    ('{"cells": "no", "nbformat": 4}', "dp_basics.ipynb is not a Jupyter notebook in format 4"),
    ("[" * 100_000, "dp_basics.ipynb is not a valid notebook: its JSON is nested too deeply"),
])
def test_malformed_notebook_is_a_clear_module_problem(tmp_path: Path, content: str,
                                                      message: str) -> None:
    files = located(tmp_path, write(tmp_path / "sub", "dp_basics.ipynb", content).parent)
    assert files.module is None and files.module_problem.startswith(message)


def test_module_file_wins_over_a_notebook(tmp_path: Path) -> None:
    folder = tmp_path / "sub"
    write(folder, "dp_basics.ipynb", "not json")
    write(folder, "dp_basics.py", "x = 1\n")
    files = located(tmp_path, folder)
    assert files.module == folder / "dp_basics.py" and files.module_problem is None


def test_magics_are_commented_out_and_strings_left_alone(tmp_path: Path) -> None:
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": True, "grade_id": "f"}},
         "source": ["%matplotlib inline\n", "def f():\n", "    !ls\n", "    return 1\n"]},
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": True, "grade_id": "g"}},
         "source": 'def g():\n    return """\n%not a magic\n"""\n'},
        {"cell_type": "code", "metadata": {"nbgrader": {"solution": True, "grade_id": "h"}},
         "source": "%%bash\necho hi\n"},
        {"cell_type": "code", "metadata": {"nbgrader": {"locked": True, "grade": True}},
         "source": "assert f() == 2  # an nbgrader test cell: never part of the module\n"},
    ]}
    extracted = extract_module(write(tmp_path, "dp_basics.ipynb", nb), MODULE)
    namespace: dict = {}
    exec(compile(extracted.source, "dp_basics.py", "exec"), namespace)
    assert namespace["f"]() == 1 and namespace["g"]() == "\n%not a magic\n"
    assert "assert f() == 2" not in extracted.source
    assert len(extracted.warnings) == 3 and "cell magic `%%bash`" in extracted.warnings[2]


def test_extract_module_refuses_huge_notebooks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("autograder.inputs.notebook.MAX_NOTEBOOK_BYTES", 10)
    with pytest.raises(NotebookError, match="larger than"):
        extract_module(write(tmp_path, "dp_basics.ipynb", notebook()), MODULE)


def _filled(helper_cell: str | None = None) -> dict:
    nb = notebook()
    functions = _reference_functions()
    for cell in nb["cells"]:
        meta = cell["metadata"]["nbgrader"]
        if meta["solution"]:
            cell["source"] = functions[meta["grade_id"]]
    if helper_cell is not None:  # a cell of the student's own, after the imports
        nb["cells"].insert(3, {"cell_type": "code", "execution_count": None, "id": "mine",
                               "metadata": {}, "outputs": [], "source": helper_cell})
    return nb


@pytest.mark.slow
def test_unzipped_folder_with_filled_notebook_and_untouched_stub_grades_the_notebook(
        tmp_path: Path) -> None:
    """The issue's case: the whole unzipped template uploaded, the work in the notebook."""
    folder = tmp_path / "dp_basics"
    for name in ("dp_basics.py", "answers.yml", "check.py", "README.md"):
        write(folder, name, (COMMITTED.parent / name).read_text())
    write(folder, "dp_basics.ipynb", _filled("import math\n\ndef _strip(x):\n    return x\n"))

    report = grade_loaded(folder, ASSIGNMENT, tmp_path / "out")

    coding = next(p for p in report.parts if p.name == "coding")
    assert coding.score == coding.max_score == 70, [t.message for t in report.tests
                                                     if t.status == "failed"]
    assert report.graded_file.file == "dp_basics.ipynb"
    assert "dp_basics.py is still the template's stub" in report.graded_file.why
    assert any("cell 4 (added by you) defines math, _strip, which were left out: to keep a "
               "helper, move it into a solution cell" in w for w in report.warnings)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "**Graded file: dp\\_basics.ipynb.** dp\\_basics.py is still the template's stub" \
        in markdown
    assert 'id="graded-file"' in (tmp_path / "out" / "report.html").read_text()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["output"].startswith("Graded file: dp_basics.ipynb. dp_basics.py is still")


def _choice(tmp_path: Path, py: str | None, nb: dict | str | None):
    folder = tmp_path / "sub"
    if py is not None:
        write(folder, "dp_basics.py", py)
    if nb is not None:
        write(folder, "dp_basics.ipynb", nb)
    files = _submission_files(folder, tmp_path / "work" / "upload", MODULE,
                              list(ASSIGNMENT.config.functions))
    return files, files.graded_file


def test_both_edited_grades_the_module_and_says_so_loudly(tmp_path: Path) -> None:
    files, graded = _choice(tmp_path, reference(SOLUTION), _filled())
    assert files.module == tmp_path / "sub" / "dp_basics.py"
    assert graded.file == "dp_basics.py"
    assert graded.why.startswith("BOTH dp_basics.py and dp_basics.ipynb hold code: "
                                    "dp_basics.py was graded and the notebook was IGNORED")


def test_stub_module_and_template_notebook_grade_the_module(tmp_path: Path) -> None:
    files, graded = _choice(tmp_path, TEMPLATE, notebook())
    assert files.module == tmp_path / "sub" / "dp_basics.py"
    assert "both the template unchanged: nothing is implemented yet" in graded.why


def test_edited_module_next_to_the_template_notebook(tmp_path: Path) -> None:
    files, graded = _choice(tmp_path, reference(SOLUTION), notebook())
    assert graded == GradedFile("dp_basics.py", "dp_basics.py was graded (dp_basics.ipynb "
                                                "is the template unchanged, so it was "
                                                "ignored)")


def test_stub_module_and_a_broken_notebook_name_the_notebook_problem(tmp_path: Path) -> None:
    files, graded = _choice(tmp_path, TEMPLATE, "{not json")
    assert files.module is None
    assert files.module_problem.startswith("dp_basics.py is still the template's stub (no "
                                           "function implemented), so dp_basics.ipynb was to be "
                                           "graded, but it could not be converted: "
                                           "dp_basics.ipynb is not a valid notebook")


def test_stub_decided_by_function_bodies_not_bytes() -> None:
    functions = list(ASSIGNMENT.config.functions)
    assert module_state(TEMPLATE, functions) == UNTOUCHED
    reformatted = TEMPLATE.replace("is not implemented yet", "TODO").replace("\n\n", "\n\n\n")
    reformatted += "\n# my notes\nimport os\n"
    assert reformatted != TEMPLATE and module_state(reformatted, functions) == UNTOUCHED
    assert module_state(TEMPLATE.replace('raise NotImplementedError("cleanup_ddp is not '
                                         'implemented yet")', "pass"), functions) == UNTOUCHED
    assert module_state("", functions) == UNTOUCHED
    one = TEMPLATE.replace('raise NotImplementedError("cleanup_ddp is not implemented yet")',
                           "return None")
    assert module_state(one, functions) == EDITED
    assert module_state(TEMPLATE + "\nwrap_ddp = lambda *a: a\n", functions) == EDITED
    assert module_state("def broken(:\n", functions) == EDITED  # the student's error to see
    assert module_state("x = 1\n", functions) == EDITED  # not the template: the student's
    assert module_state("\n# nothing yet\n", functions) == UNTOUCHED
    assert module_state(reference(SOLUTION), functions) == EDITED


def test_left_out_cells_are_named_with_how_to_keep_a_helper(tmp_path: Path) -> None:
    nb = _filled("def _strip(x):\n    return x\n")
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "scratch",
                        "metadata": {}, "outputs": [], "source": "print(1)\n"})  # defines nothing
    for cell in nb["cells"]:
        if cell["id"] == "unwrap_model":
            cell["source"] = cell["source"].replace("def unwrap_model", "_strip\n\n"
                                                    "def unwrap_model", 1)
    extracted = extract_module(write(tmp_path, "dp_basics.ipynb", nb), MODULE)
    assert extracted.warnings == [
        "dp_basics.ipynb, cell 4 (added by you) defines _strip, which was left out although your "
        "graded code uses _strip: to keep a helper, move it into a solution cell (the cell of a "
        "function you were given, e.g. the function that uses it): only those cells and the "
        "locked cells are graded"]


# ----------------------------------------------------------------------------- cells, not lines


def _solution_cell(grade_id: str, source: str) -> dict:
    return {"cell_type": "code", "metadata": {"nbgrader": {"solution": True,
                                                           "grade_id": grade_id}},
            "source": source}


def test_a_future_import_in_any_cell_works(tmp_path: Path) -> None:
    """Jupyter takes `from __future__ import annotations` in a later cell; a module takes it
    only at its top, so it is moved there (the cell keeps its lines: errors still name it)."""
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        _solution_cell("f", "def f():\n    return 1\n"),
        _solution_cell("g", "from __future__ import annotations\n\n"
                            "def g(x: NotDefinedYet) -> int:\n    return 2\n"),
    ]}
    extracted = extract_module(write(tmp_path, "dp_basics.ipynb", nb), MODULE)
    namespace: dict = {}
    exec(compile(extracted.source, "dp_basics.py", "exec"), namespace)  # no SyntaxError
    assert namespace["g"](None) == 2 and namespace["f"]() == 1
    lines = extracted.source.splitlines()
    assert lines[1].startswith("from __future__ import annotations")
    # The cell map points at each cell's first line of code, as the student wrote it.
    assert [(n, first) for _, n, first in extracted.cells] == [
        (1, "def f():"), (2, "from __future__ import annotations")]
    start = extracted.cells[1][0]  # 1-based; the cell's lines keep their places
    assert lines[start - 1].endswith("from __future__ import annotations")
    assert lines[start] == "" and lines[start + 1].startswith("def g(")


def test_errors_name_the_cell_and_its_first_line_not_a_line_of_the_module(tmp_path) -> None:
    from autograder.sandbox_runtime import cells
    from autograder.sandbox_runtime.worker import _student_frames

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "intro"},
        _solution_cell("f", "def f(x):\n    y = x + 1\n    raise ValueError(y)\n"),
        _solution_cell("g", "def g(:\n    pass\n"),
    ]}
    extracted = extract_module(write(tmp_path, "dp_basics.ipynb", nb), MODULE)
    folder = tmp_path / "sandbox"
    folder.mkdir()
    module = folder / f"{MODULE}.py"
    (folder / cells.map_name(MODULE)).write_text(json.dumps(extracted.cells))
    good = extracted.source.replace("def g(:", "def g():")
    namespace: dict = {}
    exec(compile(good, str(module), "exec"), namespace)
    with pytest.raises(ValueError) as raised:
        namespace["f"](1)
    assert _student_frames(raised.value, MODULE) == 'cell 2 ("def f(x):"), line 3 in f'
    with pytest.raises(SyntaxError) as bad:
        compile(extracted.source, str(module), "exec")
    assert _student_frames(bad.value, MODULE) == 'cell 3 ("def g(:"), line 1: def g(:'
    (folder / cells.map_name(MODULE)).unlink()  # a .py upload: lines of the file, as before
    assert _student_frames(raised.value, MODULE).startswith("line ")


@pytest.mark.slow
def test_a_graded_notebook_names_the_cell_of_an_error_and_takes_a_late_future_import(
        tmp_path: Path) -> None:
    nb = notebook()
    functions = _reference_functions()
    number = None
    for index, cell in enumerate(nb["cells"], 1):
        grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        if not cell["metadata"]["nbgrader"]["solution"]:
            continue
        cell["source"] = functions[grade_id]
        if grade_id == "unwrap_model":
            number = index
            cell["source"] = ("from __future__ import annotations\n\n"
                              "def unwrap_model(model: nn.Module) -> nn.Module:\n"
                              "    raise ValueError('on purpose')\n")
    folder = tmp_path / "submission"
    write(folder, "dp_basics.ipynb", nb)
    report = grade_loaded(folder, ASSIGNMENT, tmp_path / "out")
    messages = [t.message for t in report.tests if t.item == "unwrap_model"]
    assert messages and all("could not be imported" not in m for m in messages)
    assert any(f'cell {number} ("from __future__ import annotations"), line 4 in '
               "unwrap_model" in m for m in messages), messages
    assert not any("line 1" in m and "dp_basics.py" in m for m in messages)
    # The module imported: a function that does not call unwrap_model passes.
    wrap = [t for t in report.tests if t.item == "wrap_data_parallel"]
    assert wrap and all(t.status in ("passed", "excluded") for t in wrap)
