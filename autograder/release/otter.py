"""The otter-grader dialect of the notebook release: an otter master notebook and its files.

`otter_files` turns the generated student files (`release.student_files`) and the solution into
the folder an instructor of an otter-grader course gives to `otter assign`:

- `MODULE.ipynb`, the master notebook in otter's assign format: a `# ASSIGNMENT CONFIG` raw
  cell; the instructions and locked import cells of the nbgrader template; one question per
  student function, its cell the reference function between otter's solution markers, with the
  template's stub as otter's prompt, and one otter test calling this project's public checks;
  one question for the multiple-choice answers (no key: it checks their form only);
- `otter_checks.py` (autograder/student_files/otter_checks.py) and `otter_checks.json` (which
public tests
  check which function), `check.py`, `answers.schema.json` and `public_tests/`: what the otter
  tests run, so a student gets the feedback of `autograder check`;
- `requirements.txt` for otter's grading image, and the blank `answers.yml`, which otter needs
  to find (the notebook's answers cell writes the student's own).

The cells keep the template's nbgrader metadata, which otter leaves alone, so this project's
grader reads a student notebook made by `otter assign` as it reads the nbgrader one. The
hidden tests and the key never go into this folder: otter's tests ship with the student's
notebook, where anyone can read them.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import yaml

from autograder.inputs.notebook import INSTRUCTIONS_ID, notebook_json, template_cells
from autograder.project.assignment import Assignment
from autograder.project.markers import BEGIN, END, strip_solutions
from autograder.student_files import otter_checks

MULTIPLE_CHOICE = "multiple_choice"  # the otter question of the multiple-choice part
SUPPORT_FILES = ("check.py", otter_checks.SCHEMA_NAME, "otter_checks.py", otter_checks.CHECKS_FILE)
# otter's own markers (otter-grader's assign format, v5 and later)
OTTER_BEGIN, OTTER_END = "# BEGIN SOLUTION NO PROMPT", "# END SOLUTION"
PROMPT_BEGIN, PROMPT_END = '""" # BEGIN PROMPT', '""" # END PROMPT'


class OtterError(ValueError):
    """The sources cannot give an otter master notebook; the message says why."""


# ----------------------------------------------------------------------------- solution cells


def otter_solution(solution: str) -> str:
    """The solution with otter's markers: each `### BEGIN/END SOLUTION` block stays, between
    `# BEGIN SOLUTION NO PROMPT` and `# END SOLUTION`, followed by the template's stub as an
    otter prompt (a string in the master, the code of the student's notebook)."""
    strip_solutions(solution)  # checks the markers are balanced
    lines = solution.splitlines(keepends=True)
    out: list[str] = []
    for number, line in enumerate(lines):
        indent = line[: len(line) - len(line.lstrip())]
        if line.strip() == BEGIN:
            if not indent:
                raise OtterError(f"line {number + 1}: a solution block at module level (a "
                                 "solution-only helper) has no place in an otter notebook; "
                                 "move the helper into the function that uses it")
            out.append(f"{indent}{OTTER_BEGIN}\n")
        elif line.strip() == END:
            # The stub strip_solutions puts in place of this block: the template's own line.
            stub = strip_solutions("".join(lines[: number + 1])).splitlines()[-1]
            out += [f"{indent}{OTTER_END}\n", f"{indent}{PROMPT_BEGIN}\n", f"{stub}\n",
                    f"{indent}{PROMPT_END}\n"]
        else:
            out.append(line)
    return "".join(out)


def _definition(source: str, name: str | None = None) -> tuple[int, int]:
    """0-based first line (decorators included) and end line of the top-level definition
    `name` in `source` (the first one when `name` is None)."""
    for node in ast.parse(source).body:
        if name is None or (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef
                                       | ast.ClassDef) and node.name == name):
            decorators = getattr(node, "decorator_list", [])
            return min([node.lineno, *(d.lineno for d in decorators)]) - 1, node.end_lineno or 0
    raise OtterError(f"no top-level definition of {name} in the solution")


# ----------------------------------------------------------------------------- public tests


def _module_names(tree: ast.AST, module: str) -> tuple[set[str], dict[str, str]]:
    """Names bound to the student's module (`import m as S`) and to its functions
    (`from m import f as g`: g -> f)."""
    aliases, direct = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == module}
        elif isinstance(node, ast.ImportFrom) and node.module == module and not node.level:
            direct |= {a.asname or a.name: a.name for a in node.names}
    return aliases, direct


def _is_fixture(node: ast.AST) -> bool:
    for decorator in getattr(node, "decorator_list", []):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if getattr(target, "attr", getattr(target, "id", None)) == "fixture":
            return True
    return False


def _arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in node.args.args if a.arg != "self"]


def public_tests_by_function(sources: dict[str, str], module: str,
                             functions: list[str]) -> dict[str, list[str]]:
    """Which public tests check which function: {function: ["file.py::test", ...]}.

    `sources` holds the public tests folder's Python files by relative path. A test belongs to
    the function its name starts with (`test_<function>...`); otherwise to the functions it
    calls; otherwise to those its fixtures call (`setup_group` for a test that only uses a
    process group made by it). A test that reaches no function stops the release: its check
    would run under no question.
    """
    fixtures: dict[str, tuple[set[str], list[str]]] = {}  # name -> (calls, fixtures requested)
    tests: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, set[str]]] = []
    for path, text in sorted(sources.items()):
        tree = ast.parse(text, filename=path)
        aliases, direct = _module_names(tree, module)

        def calls(node: ast.AST, aliases: set[str] = aliases,
                  direct: dict[str, str] = direct) -> set[str]:
            found = set()
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                        and sub.value.id in aliases and sub.attr in functions:
                    found.add(sub.attr)
                elif isinstance(sub, ast.Name) and direct.get(sub.id) in functions:
                    found.add(direct[sub.id])
            return found

        name = Path(path).name
        is_test_file = name.startswith("test_") or name.endswith("_test.py")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if _is_fixture(node):
                    fixtures[node.name] = (calls(node), _arguments(node))
                elif is_test_file and node.name.startswith("test"):
                    tests.append((f"{path}::{node.name}", node, calls(node)))
            elif isinstance(node, ast.ClassDef) and is_test_file and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) \
                            and item.name.startswith("test"):
                        tests.append((f"{path}::{node.name}::{item.name}", item, calls(item)))

    def through_fixtures(names: list[str], seen: set[str]) -> set[str]:
        found: set[str] = set()
        for name in names:
            if name in fixtures and name not in seen:
                seen.add(name)
                found |= fixtures[name][0] | through_fixtures(fixtures[name][1], seen)
        return found

    by_function: dict[str, list[str]] = {f: [] for f in functions}
    orphans = []
    for node_id, node, called in tests:
        named = [f for f in functions if node.name == f"test_{f}"
                 or node.name.startswith(f"test_{f}_")]
        targets = {max(named, key=len)} if named else called \
            or through_fixtures(_arguments(node), set())
        if not targets:
            orphans.append(node_id)
        for function in sorted(targets):
            by_function[function].append(node_id)
    if orphans:
        raise OtterError(f"public tests that reach no function of {module}: "
                         f"{', '.join(orphans)}; name them test_<function>_... or call the "
                         "function, so that a notebook question runs them")
    return by_function


# ----------------------------------------------------------------------------- the notebook


def _points(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _cell(kind: str, cell_id: str, text: str) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": kind, "id": cell_id, "metadata": {},
                            "source": text.strip("\n").splitlines(keepends=True)}
    if kind == "code":
        cell |= {"execution_count": None, "outputs": []}
    return cell


def _block(cell_id: str, marker: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A raw boundary cell of otter's format (`# BEGIN QUESTION` with its YAML, `# END TESTS`)."""
    text = marker + ("\n" + yaml.safe_dump(config, sort_keys=False) if config else "")
    return _cell("raw", cell_id, text)


def _assignment_config(assignment: Assignment, public_tests: bool) -> str:
    config = {
        "name": assignment.name,  # otter refuses a notebook of another assignment
        "requirements": "requirements.txt",
        # What the otter tests run, in the student's folder and in otter's grading image.
        "files": [*SUPPORT_FILES, *([otter_checks.PUBLIC_TESTS] if public_tests else [])],
        # Written by the notebook's answers cell; the export cell puts it in the submission.
        "student_files": [otter_checks.ANSWERS_FILE],
        # Exception-based tests: a failed check shows check.py's message, not a doctest diff.
        "tests": {"ok_format": False},
        # The code and answers.yml are graded, not a PDF (which needs LaTeX on students' side).
        "export_cell": {"pdf": False},
    }
    return "# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False)


def _howto(assignment: Assignment) -> str:
    module = assignment.config.module
    return f"""\
## Working in this notebook

- Run the cells from the top, in order. Write each function in its own cell, keeping its name
  and signature; the docstrings are the specification the grader checks.
- The `grader.check(...)` cell after a function runs that function's public tests, the same as
  `python check.py` runs on `{module}.py`. They are a sample: the grader's hidden tests check
  every rule of the docstrings.
- The multiple-choice questions are at the end: answer them in the `answers` cell; running it
  saves your answers to `{otter_checks.ANSWERS_FILE}`.
- To submit, run the export cell at the end: its zip holds this notebook and
  `{otter_checks.ANSWERS_FILE}`. Write all your code, helpers included, in the function cells:
  the grader takes the code of those cells and of the import cells, and nothing else."""


def _function_question(name: str, points: float, cell: dict[str, Any], marked: str,
                       tests: list[str]) -> list[dict[str, Any]]:
    stub = "".join(cell["source"])
    first, _ = _definition(stub)
    header = "".join(stub.splitlines(keepends=True)[:first])  # the comments above the def
    start, end = _definition(marked, name)
    solution = dict(cell, source=(header + "".join(
        marked.splitlines(keepends=True)[start:end])).strip("\n").splitlines(keepends=True))
    what = (f"The check after it runs the public tests of `{name}` "
            f"({len(tests)} in `{otter_checks.PUBLIC_TESTS}/`), as `python check.py` does."
            if tests else f"No public test covers `{name}`: its check only makes sure it is "
            "defined.")
    text = (f"### `{name}` ({points:g} point{'' if points == 1 else 's'})\n\n"
            f"Implement `{name}` in the cell below. {what}")
    test = (f"def test_{name}(env):\n"
            f"    from otter_checks import check_function\n"
            f"    check_function(env, {name!r})\n")
    return [
        _block(f"{name}-question", "# BEGIN QUESTION", {"name": name, "points": _points(points)}),
        _cell("markdown", f"{name}-prompt", text),
        _block(f"{name}-solution", "# BEGIN SOLUTION"),
        solution,
        _block(f"{name}-solution-end", "# END SOLUTION"),
        _block(f"{name}-tests", "# BEGIN TESTS"),
        _cell("code", f"{name}-test", test),
        _block(f"{name}-tests-end", "# END TESTS"),
        _block(f"{name}-question-end", "# END QUESTION"),
    ]


def _multiple_choice_question(assignment: Assignment) -> list[dict[str, Any]]:
    bank = assignment.bank
    name = MULTIPLE_CHOICE
    intro = (
        f"### Multiple-choice questions ({bank.total_points:g} points)\n\n"
        "Answer in the `answers` cell below: replace each `None` with one letter (`\"B\"`), or "
        "with a list of letters (`[\"A\", \"C\"]`) for \"select all that apply\". Letters are "
        "case-insensitive; a question left at `None` scores 0, as a wrong answer does. Running "
        f"the cell saves your answers to `{otter_checks.ANSWERS_FILE}`, which you submit with "
        "this notebook. The check below looks at their form only: whether they are right is "
        "the grader's call.")
    cells = [
        # 0 points in otter: the grader scores this part with the key, which stays there.
        _block(f"{name}-question", "# BEGIN QUESTION", {"name": name, "points": 0}),
        _cell("markdown", f"{name}-prompt", intro),
    ]
    entries = []
    for q in bank.questions:
        kind = "select all that apply: a list of letters" if q.multiple else "one letter"
        text = f"#### {q.title} ({q.points:g} point{'' if q.points == 1 else 's'}; {kind})\n\n"
        text += q.stem.strip() + "\n"
        if q.code:
            text += f"\n```python\n{q.code.rstrip()}\n```\n"
        text += "\n" + "\n".join(f"- **{letter}**: {option.strip()}"
                                 for letter, option in q.options.items())
        cells.append(_cell("markdown", f"question-{q.id}", text))
        entries.append(f"    {q.id!r}: None,  # {q.title} ({kind})")
    answers = "\n".join([
        "from otter_checks import save_answers",
        "",
        f"{otter_checks.ANSWERS_VARIABLE} = {{",
        *entries,
        "}",
        f"save_answers({otter_checks.ANSWERS_VARIABLE})",
    ])
    test = (f"def test_{name}(env):\n"
            f"    from otter_checks import check_answers\n"
            f"    check_answers(env)\n")
    return [
        *cells,
        # A prompt, not a solution: the master holds no key, and students may edit the cell.
        _block(f"{name}-prompt-begin", "# BEGIN PROMPT"),
        _cell("code", otter_checks.ANSWERS_VARIABLE, answers),
        _block(f"{name}-prompt-end", "# END PROMPT"),
        _block(f"{name}-tests", "# BEGIN TESTS"),
        _cell("code", f"{name}-test", test),
        _block(f"{name}-tests-end", "# END TESTS"),
        _block(f"{name}-question-end", "# END QUESTION"),
    ]


def master_notebook(assignment: Assignment, tests: dict[str, list[str]]) -> str:
    """The otter master notebook (JSON, deterministic) for `assignment`; `tests` as
    `public_tests_by_function` gives them."""
    solution = assignment.solution.read_text(encoding="utf-8")
    marked = otter_solution(solution)
    functions = assignment.config.functions
    template = template_cells(strip_solutions(solution))
    clash = {c["id"] for c in template} & {MULTIPLE_CHOICE, otter_checks.ANSWERS_VARIABLE}
    if clash:
        raise OtterError(f"{', '.join(sorted(clash))}: the otter notebook uses this name for "
                         "the multiple-choice part; rename the function")
    config = _assignment_config(assignment, any(tests.values()))
    cells = [_cell("raw", "assignment-config", config)]
    for cell in template:
        if cell["metadata"]["nbgrader"]["solution"]:
            name = cell["id"]
            cells += _function_question(name, functions.get(name, 0), cell, marked,
                                        tests.get(name, []))
        else:
            cells.append(cell)
            if cell["id"] == INSTRUCTIONS_ID:
                cells.append(_cell("markdown", "working-in-this-notebook", _howto(assignment)))
    cells += _multiple_choice_question(assignment)
    return notebook_json(cells)


def otter_files(assignment: Assignment, student: dict[str, bytes]) -> dict[str, bytes]:
    """The otter master folder, by relative path: the master notebook and what its tests need.

    `student` is the student template (`release.student_files`): the support files are the
    very ones students of the nbgrader flavour get.
    """
    module = assignment.config.module
    public = {name.removeprefix("tests/"): content for name, content in student.items()
              if name.startswith("tests/")}
    sources = {name: content.decode("utf-8") for name, content in public.items()
               if name.endswith(".py")}
    tests = public_tests_by_function(sources, module, list(assignment.config.functions))
    checks = {"module": module, "tests": {f: t for f, t in tests.items() if t}}
    files = {
        f"{module}.ipynb": master_notebook(assignment, tests).encode(),
        "otter_checks.py": Path(otter_checks.__file__).read_bytes(),
        otter_checks.CHECKS_FILE: (json.dumps(checks, indent=2) + "\n").encode(),
        **{f"{otter_checks.PUBLIC_TESTS}/{name}": content for name, content in public.items()},
    }
    for name in ("check.py", otter_checks.SCHEMA_NAME, "requirements.txt",
                 otter_checks.ANSWERS_FILE):
        files[name] = student[name]
    return dict(sorted(files.items()))
