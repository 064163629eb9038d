"""The notebook flavour of an assignment: the template as nbgrader cells, and back to a module.

`template_notebook` turns the student template module (solution blocks already stubbed by
`markers.strip_solutions`) into an nbformat v4 notebook: the module docstring as a locked
markdown cell, top-level code outside functions as locked code cells, and one editable nbgrader
solution cell per function (or class) holding a stub. It writes the JSON itself, byte for byte
as nbformat does (sorted keys, one-space indent, sources split into lines), so the release needs
no Jupyter package and the same sources always give the same file.

`extract_module` does the reverse for a student's upload: the code of the solution cells and of
the locked code cells, in notebook order. It only reads JSON, in a limited child process
(`autograder.sandbox.untrusted_parse`: a notebook may hold a huge number, or code whose compile()
check exhausts memory): the notebook is never executed by the grader, and its code runs later in the
sandbox like any module.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.project.inert import bounded, label
from autograder.sandbox.untrusted_parse import ChildFailed, run_limited
from autograder.student_files import check as student_check
from autograder.student_files.check import MAX_NOTEBOOK_BYTES

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema
INSTRUCTIONS_ID = "instructions"
_CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # nbformat 4.5 cell ids
_STUB = "NotImplementedError"
MAX_WARNINGS = 12  # notes on one notebook (cells left out, magics); then "... and N more"


class NotebookError(ValueError):
    """A submitted notebook that cannot give a module; the message is for the student."""


# ----------------------------------------------------------------------------- template


def _nbgrader(grade_id: str, solution: bool) -> dict:
    return {"nbgrader": {"grade": False, "grade_id": grade_id, "locked": not solution,
                         "schema_version": SCHEMA_VERSION, "solution": solution}}


def _lines(text: str) -> list[str]:
    # nbformat's split_lines: each line keeps its newline, the last one has none.
    return text.splitlines(keepends=True)


def _cell(kind: str, grade_id: str, text: str, solution: bool = False) -> dict:
    cell = {"cell_type": kind, "id": grade_id, "metadata": _nbgrader(grade_id, solution),
            "source": _lines(text.strip("\n"))}
    if kind == "code":
        cell |= {"execution_count": None, "outputs": []}
    return cell


def _has_stub(node: ast.AST) -> bool:
    """Whether `node` holds a `raise NotImplementedError(...)` stub: the student's to write."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Raise) and sub.exc is not None:
            exc = sub.exc.func if isinstance(sub.exc, ast.Call) else sub.exc
            if isinstance(exc, ast.Name) and exc.id == _STUB:
                return True
    return False


def template_cells(template: str,
                   instructions: Callable[[str], str] | None = None) -> list[dict]:
    """The cells of the notebook for `template` (the stubbed module source), in module order.

    Each top-level function or class with a stub is a solution cell named after it, with the
    comments above it; runs of other top-level statements are locked code cells. The module's
    docstring is the instructions cell, through `instructions` when given.
    """
    tree = ast.parse(template)
    lines = template.splitlines(keepends=True)
    body = list(tree.body)
    cells = []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        docstring = ast.get_docstring(tree, clean=True)
        cells.append(_cell("markdown", INSTRUCTIONS_ID,
                           instructions(docstring) if instructions else docstring))
        start = body.pop(0).end_lineno
    else:
        start = 0
    pending: list[str] = []  # locked code not yet written to a cell
    code_cells = 0

    def flush() -> None:
        nonlocal code_cells
        text = "".join(pending).strip("\n")
        pending.clear()
        if text:
            code_cells += 1
            cells.append(_cell("code", "imports" if code_cells == 1 else f"code_{code_cells}",
                               text))

    for node in body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
        gap = lines[start:first]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
                and _has_stub(node):
            # The gap holds only comments (a section heading, say): they introduce this cell.
            flush()
            cells.append(_cell("code", node.name, "".join(gap + lines[first:node.end_lineno]),
                               solution=True))
        else:
            pending += gap + lines[first:node.end_lineno]
        start = node.end_lineno
    pending += lines[start:]
    flush()
    ids = [c["id"] for c in cells]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    bad = [i for i in ids if not _CELL_ID.match(i)]
    if duplicates or bad:
        raise ValueError(f"notebook cell ids must be unique and match {_CELL_ID.pattern}: "
                         f"duplicates {duplicates}, invalid {bad}")
    return cells


def template_notebook(template: str, instructions: Callable[[str], str] | None = None) -> str:
    """The notebook, as nbformat.writes gives it (plus the final newline nbformat.write adds)."""
    return notebook_json(template_cells(template, instructions))


def notebook_json(cells: list[dict]) -> str:
    """A Python 3 notebook of `cells`, serialised as nbformat.write does."""
    notebook = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(notebook, indent=1, sort_keys=True, separators=(",", ": "),
                      ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------------- extraction
#
# The conversion itself lives in autograder/student_files/check.py (shipped to students as check.py,
# which must stay self-contained): one code path, so check.py and the grader agree on every
# notebook. Here it runs in a limited child process.


@dataclass
class Extracted:
    source: str
    warnings: list[str] = field(default_factory=list)
    state: str = student_check.EDITED  # UNTOUCHED: no function of the assignment implemented
    cells: list[list] = field(default_factory=list)  # student_check.Converted.cells


def extract_module(notebook: Path, module: str, functions: list[str] | None = None) -> Extracted:
    """`module`.py's source from the notebook's solution cells and locked code cells.

    Locked cells that are nbgrader grade cells (tests) and cells the student added (neither
    solution nor locked: experiments) are left out, so importing the module runs neither; an
    added cell that defines something is named in a warning. Read in a limited child process;
    every problem is a NotebookError for the student.
    """
    try:
        reply = run_limited(_extract_to_wire, str(notebook), module, functions,
                            MAX_NOTEBOOK_BYTES)
    except ChildFailed as exc:
        why = {"memory": "reading it needed more memory than the grader allows",
               "depth": "it is nested too deeply",
               "time": "reading it took longer than the grader allows"}.get(
                   exc.reason, f"it could not be read ({exc})")
        raise NotebookError(f"{label(notebook.name)} could not be converted: {why}; submit "
                            f"{module}.py instead") from None
    if "problem" in reply:
        raise NotebookError(reply["problem"])
    return Extracted(reply["source"], reply["warnings"], reply["state"], reply["cells"])


def module_state(path: Path, functions: list[str] | None) -> str:
    """Whether the module file implements anything (student_check.module_state), parsed in a
    limited child process: EDITED or UNTOUCHED."""
    try:
        return run_limited(_state_to_wire, str(path), functions)
    except ChildFailed:
        return student_check.EDITED  # too big or deep to parse: not the template's stub


def _state_to_wire(path: str, functions: list[str] | None) -> str:
    try:
        return student_check.module_state(Path(path).read_bytes(), functions)
    except OSError:
        return student_check.EDITED


def _extract_to_wire(notebook: str, module: str, functions: list[str] | None,
                     max_bytes: int) -> dict:
    """In the child: the extracted module as JSON, or the problem for the student."""
    try:
        converted = student_check.convert_notebook(Path(notebook), module, functions, max_bytes)
    except student_check.NotebookProblem as exc:
        return {"problem": str(exc)}
    except OSError as exc:
        return {"problem": f"{label(Path(notebook).name)} could not be read: "
                           f"{exc.strerror or type(exc).__name__}"}
    return {"source": converted.source, "warnings": bounded(converted.warnings, MAX_WARNINGS),
            "state": converted.state, "cells": converted.cells}
