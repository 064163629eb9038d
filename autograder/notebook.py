"""The notebook flavour of an assignment: the template as nbgrader cells, and back to a module.

`template_notebook` turns the student template module (solution blocks already stubbed by
`markers.strip_solutions`) into an nbformat v4 notebook: the module docstring as a locked
markdown cell, top-level code outside functions as locked code cells, and one editable nbgrader
solution cell per function (or class) holding a stub. It writes the JSON itself, byte for byte
as nbformat does (sorted keys, one-space indent, sources split into lines), so the release needs
no Jupyter package and the same sources always give the same file.

`extract_module` does the reverse for a student's upload: the code of the solution cells and of
the locked code cells, in notebook order. It only reads JSON, in a limited child process
(`autograder.untrusted_parse`: a notebook may hold a huge number, or code whose compile() check
exhausts memory): the notebook is never executed by the grader, and its code runs later in the
sandbox like any module.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .inert import bounded, label
from .untrusted_parse import ChildFailed, run_limited

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema
INSTRUCTIONS_ID = "instructions"
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024  # outputs and images included; the code is a tiny part
# Cell magics whose body is Python: only the magic line is commented out. Any other (`%%bash`,
# `%%writefile`, ...) has a body that is not Python, so the whole cell is.
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
_CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # nbformat 4.5 cell ids
_STUB = "NotImplementedError"
MAX_WARNINGS = 10  # notes on one notebook (magics commented out); then "... and N more"


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


def template_cells(template: str) -> list[dict]:
    """The cells of the notebook for `template` (the stubbed module source), in module order.

    Each top-level function or class with a stub is a solution cell named after it, with the
    comments above it; runs of other top-level statements are locked code cells.
    """
    tree = ast.parse(template)
    lines = template.splitlines(keepends=True)
    body = list(tree.body)
    cells = []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        cells.append(_cell("markdown", INSTRUCTIONS_ID, ast.get_docstring(tree, clean=True)))
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


def template_notebook(template: str) -> str:
    """The notebook, as nbformat.writes gives it (plus the final newline nbformat.write adds)."""
    return notebook_json(template_cells(template))


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


@dataclass
class Extracted:
    source: str
    warnings: list[str] = field(default_factory=list)


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    return source if isinstance(source, str) else ""


def _comment_magics(code: str, where: str, warnings: list[str]) -> str:
    """Comment out IPython magics and shell escapes, which are not Python."""
    try:
        compile(code, where, "exec")
        return code  # valid Python: a `%` or `!` line here is inside a string, leave it
    except SyntaxError:
        pass
    except (ValueError, MemoryError, RecursionError):
        # Null bytes, or nesting too deep for the compiler: importing the module in the
        # sandbox gives the student the same error, with its place.
        return code
    lines = code.splitlines()
    first = lines[0].strip() if lines else ""
    if first.startswith("%%") and first[2:].split(" ")[0] not in _PYTHON_CELL_MAGICS:
        warnings.append(f"{where}: the cell magic `{label(first, 60)}` makes the whole cell "
                        "non-Python; it was commented out")
        return "\n".join(f"# {line}" if line else "#" for line in lines)
    out = []
    for line in lines:
        text = line.lstrip()
        if text.startswith(("%", "!")):
            indent = line[: len(line) - len(text)]
            out.append(f"{indent}pass  # {text}" if indent else f"# {text}")
            warnings.append(f"{where}: `{label(text, 60)}` is an IPython magic or shell command, "
                            "not Python; it was commented out")
        else:
            out.append(line)
    return "\n".join(out)


def _nbgrader_meta(cell: dict) -> dict:
    metadata = cell.get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def extract_module(notebook: Path, module: str) -> Extracted:
    """`module`.py's source from the notebook's solution cells and locked code cells.

    Locked cells that are nbgrader grade cells (tests) and cells the student added (neither
    solution nor locked: experiments) are left out, so importing the module runs neither.
    Read in a limited child process; every problem is a NotebookError for the student.
    """
    try:
        reply = run_limited(_extract_to_wire, str(notebook), module)
    except ChildFailed as exc:
        why = {"memory": "reading it needed more memory than the grader allows",
               "depth": "it is nested too deeply",
               "time": "reading it took longer than the grader allows"}.get(
                   exc.reason, f"it could not be read ({exc})")
        raise NotebookError(f"{label(notebook.name)} could not be converted: {why}; submit "
                            f"{module}.py instead") from None
    if "problem" in reply:
        raise NotebookError(reply["problem"])
    return Extracted(reply["source"], reply["warnings"])


def _extract_to_wire(notebook: str, module: str) -> dict:
    """In the child: the extracted module as JSON, or the problem for the student."""
    try:
        extracted = _extract_here(Path(notebook), module)
    except NotebookError as exc:
        return {"problem": str(exc)}
    except OSError as exc:
        return {"problem": f"{label(Path(notebook).name)} could not be read: "
                           f"{exc.strerror or type(exc).__name__}"}
    return {"source": extracted.source, "warnings": extracted.warnings}


def _extract_here(notebook: Path, module: str) -> Extracted:
    name = label(notebook.name)
    if notebook.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(f"{name} is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB; clear its "
                            f"outputs (Kernel > Restart & Clear Output) or submit {module}.py")
    try:
        data = json.loads(notebook.read_bytes().decode("utf-8-sig"))
    except RecursionError:  # absurdly nested JSON: refused, never a crash of the grader
        raise NotebookError(f"{name} is not a valid notebook: its JSON is nested too deeply") \
            from None
    except UnicodeDecodeError:
        raise NotebookError(f"{name} is not a valid notebook: it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise NotebookError(f"{name} is not a valid notebook: it is not valid JSON ({exc.msg} at "
                            f"line {exc.lineno}, column {exc.colno}); download it again from "
                            f"Jupyter (File > Download) or submit {module}.py") from None
    except ValueError:  # int() refuses numbers over 4,300 digits
        raise NotebookError(f"{name} is not a valid notebook: its JSON holds a number too long "
                            f"to read; download it again from Jupyter (File > Download) or "
                            f"submit {module}.py") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list) or data.get("nbformat") != 4:
        raise NotebookError(f"{name} is not a Jupyter notebook in format 4 (no list of cells); "
                            f"download it again from Jupyter (File > Download) or submit "
                            f"{module}.py")
    warnings: list[str] = []
    parts = []
    solutions = 0
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = _nbgrader_meta(cell)
        solution = meta.get("solution") is True
        if not (solution or (meta.get("locked") is True and meta.get("grade") is not True)):
            continue
        solutions += solution
        grade_id = meta.get("grade_id")
        # The label is the student's to write: one short inert line (it also heads a comment).
        where = f"{name}, cell {number}" + (f" ({label(str(grade_id), 60)})" if grade_id else "")
        code = _comment_magics(_source(cell).strip("\n"), where, warnings)
        parts.append(f"# --- {where}\n{code}\n")
    if not solutions:
        raise NotebookError(
            f"{name} has no solution cells (cells with nbgrader solution metadata): write your "
            f"code in the function cells of the notebook you were given, which carry that "
            f"metadata (do not copy it into new cells), or submit {module}.py instead")
    header = (f"# {module}.py, extracted by the autograder from {name}: its solution cells and "
              "locked code cells, in notebook order.\n")
    return Extracted(header + "\n\n".join(parts), bounded(warnings, MAX_WARNINGS))
