"""Check your work before you submit: run `python check.py` in your assignment folder.

It checks, without the answer key (a well-formed answer is not necessarily a right one):

1. that your module (the assignment's .py file) is there and has no syntax error;
2. your answers file (answers.yml, or answers.json) against answers.schema.json, question by
   question: one letter where one is expected, a list of letters for "select all that apply",
   letters among the options, no unknown or repeated question ids;
3. your code against the public tests in tests/, with pytest.

Exit status 0 when everything is in order, 1 when something needs fixing.

This file is self-contained on purpose: it is shipped to students as check.py and needs only
the standard library, PyYAML, jsonschema and pytest (requirements.txt). Instructors reach the same
code as `autograder check`.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODULE = None  # the assignment's module name; `autograder release` sets it in check.py
FUNCTIONS = None  # the functions the grader scores; `autograder release` sets them in check.py

ANSWER_FILE_NAMES = ("answers.yml", "answers.yaml", "answers.json")
SCHEMA_NAME = "answers.schema.json"
TESTS_TIMEOUT_S = 900
# pytest's own last line of a failure (its crash location): "path.py:12: NotImplementedError".
_CRASH_LINE = re.compile(r"^(?P<path>\S.*):(?P<line>\d+): (?P<type>[A-Za-z_][\w.]*)$")


@dataclass
class Section:
    """The outcome of one check: lines to show, and how many of them are problems."""

    title: str
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)  # not done yet, though nothing is wrong


# ----------------------------------------------------------------------------- the module


def find_file(folder: Path, name: str) -> tuple[Path | None, str | None]:
    """`name` in `folder`, or the upload rename the grader would take for it (with a note)."""
    exact = folder / name
    if exact.is_file():
        return exact, None
    stem, suffix = Path(name).stem, Path(name).suffix
    pattern = re.compile(RENAMED.format(stem=re.escape(stem)) + "$", re.IGNORECASE)
    candidates = sorted(p for p in folder.iterdir() if p.suffix.lower() == suffix
                        and pattern.match(p.stem) and p.is_file() and not p.is_symlink())
    if not candidates:
        return None, None
    return candidates[0], (f"'{_label(candidates[0].name)}' is graded as {name}; name it "
                           f"{name}")


def _compile_problem(source: bytes | str, name: str) -> str | None:
    try:
        compile(source, name, "exec")
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        return f"{name} {where}: {type(exc).__name__}: {exc.msg}"
    except ValueError as exc:  # null bytes
        return f"{name} cannot be compiled: {exc}"
    except (MemoryError, RecursionError):  # thousands of nested brackets or lambdas
        return f"{name} cannot be compiled: it is nested too deeply"
    return None


def check_module(folder: Path, module: str, functions: list[str] | None = None) -> Section:
    """The section of `check_code`, without keeping the module it tests."""
    with tempfile.TemporaryDirectory(prefix="check-") as tmp:
        return check_code(folder, module, functions, Path(tmp))[0]


def check_code(folder: Path, module: str, functions: list[str] | None,
               work: Path) -> tuple[Section, Path]:
    """The code the grader would grade: `module`.py, or the notebook converted exactly as the
    grader converts it (written as `module`.py into `work`). Returns the section and the folder
    that holds the module to test."""
    section = Section(f"{module}.py")
    path, renamed = find_file(folder, f"{module}.py")
    notebook, notebook_renamed = find_file(folder, f"{module}.ipynb")
    if notebook is not None:
        converted, problem = None, None
        try:
            converted = convert_notebook(notebook, module, functions)
        except NotebookProblem as exc:
            problem = str(exc)
        except OSError as exc:
            problem = f"{_label(notebook.name)} could not be read: {exc.strerror or exc}"
        state = module_state(path.read_bytes(), functions) if path else None
        chosen, why = choose_graded(module, path.name if path else None, state, notebook.name,
                                    converted.state if converted else BROKEN, problem)
        if chosen == notebook.name:
            section.title = f"{_label(notebook.name)} (graded as {module}.py)"
            section.lines.append(f"graded file: {_label(notebook.name)}")
            section.notes += [n for n in (why, notebook_renamed) if n]
            if converted is None:
                section.problems.append(problem or "the notebook could not be converted")
                return section, folder
            section.notes += converted.warnings
            compiled = _compile_problem(converted.source, f"{module}.py (from the notebook)")
            if compiled:
                section.problems.append(compiled)
            else:
                section.lines.append("converted as the grader converts it, no syntax errors")
            if converted.state != EDITED:
                section.todo.append("no function is implemented yet")
            target = work / "graded"
            target.mkdir(parents=True, exist_ok=True)
            (target / f"{module}.py").write_text(converted.source, encoding="utf-8",
                                                 errors="surrogatepass")
            return section, target
        section.lines.append(f"graded file: {_label(path.name) if path else module + '.py'}")
        if why:
            section.notes.append(why)
    if path is None:
        others = sorted(p.name for p in folder.glob("*.py") if p.name != "check.py")
        section.problems.append(
            f"{module}.py is missing" + (f" (found: {', '.join(others)}); name your file "
                                         f"{module}.py" if others else ""))
        return section, folder
    if renamed:
        section.notes.append(renamed)
    source = path.read_bytes()
    problem = _compile_problem(source, path.name)
    if problem:
        section.problems.append(problem)
    else:
        section.lines.append("found, no syntax errors")
        if module_state(source, functions) != EDITED:
            section.todo.append("no function is implemented yet")
    if path.name != f"{module}.py" and not problem:  # the public tests import MODULE.py
        target = work / "graded"
        target.mkdir(parents=True, exist_ok=True)
        (target / f"{module}.py").write_bytes(source)
        return section, target
    return section, folder


# ----------------------------------------------------------------------------- notebooks
#
# The one conversion of a notebook into the module, and the one choice between the module and a
# notebook: the grader runs exactly this code (autograder.inputs.notebook and
# autograder.grading.grade import it
# from here, in a limited child process), and check.py is this file, so both agree.

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024  # outputs and images included; the code is a tiny part
MAX_NOTES = 10  # notes on one notebook; then "... and N more"
# Cell magics whose body is Python: only the magic line is commented out. Any other (`%%bash`,
# `%%writefile`, ...) has a body that is not Python, so the whole cell is.
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
# Browser and OS renames of a re-downloaded or copied file: "x (1).py", "x-2.py", "Copy of x.py".
RENAMED = r"(?:copy of )?{stem}(?:[ _-]?\(\d+\)|[ _-]\d+|[ _-]copy)?"
# What text from a student must never bring to a reader as it is: C0 controls but \t and \n,
# DEL, C1 controls; bidi embeddings, overrides and isolates, the marks that steer them;
# line/paragraph separators (a new line to some readers, not to others); lone surrogates
# (undecodable file names), which no UTF-8 writer accepts. Each is shown as a visible escape.
# The one copy: this file is shipped alone, and the engine's autograder.project.inert uses it.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                    "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
UNSAFE_IN_A_LINE = re.compile(UNSAFE.pattern[:-1] + "\n\t]")  # also what starts a new line
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def escape(match: re.Match[str]) -> str:
    """The visible escape of one unsafe character: \\r, \\x1b, \\u202e."""
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
# What the grader does with a module that is still the template's stub and a notebook: states.
MISSING, UNTOUCHED, EDITED, BROKEN = "missing", "untouched", "edited", "broken"
HOW_TO_KEEP = ("move it into a solution cell (the cell of a function you were given, e.g. the "
               "function that uses it): only those cells and the locked cells are graded")


class NotebookProblem(ValueError):
    """A notebook that cannot give a module; the message is for the student."""


@dataclass
class Converted:
    """A notebook as the module the grader grades, with notes on what was changed or left out."""

    source: str
    warnings: list[str] = field(default_factory=list)
    state: str = EDITED  # UNTOUCHED when no function of the assignment is implemented in it
    # [first line of the cell's code in `source`, cell number, the cell's first line]: so that
    # an error names the cell the student wrote, not a line of a file they never see.
    cells: list[list] = field(default_factory=list)


def _label(text: str, limit: int = 80) -> str:
    """A name from the student's files, fit to quote: one line, control characters escaped."""
    text = UNSAFE_IN_A_LINE.sub(escape, str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded(lines: list[str], count: int = MAX_NOTES) -> list[str]:
    return lines[:count] + ([f"... and {len(lines) - count} more"] if lines[count:] else [])


def _cell_source(cell: dict) -> str:
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
        # Null bytes, or nesting too deep for the compiler: importing the module gives the
        # student the same error, with its place.
        return code
    lines = code.splitlines()
    first = lines[0].strip() if lines else ""
    if first.startswith("%%") and first[2:].split(" ")[0] not in _PYTHON_CELL_MAGICS:
        warnings.append(f"{where}: the cell magic `{_label(first, 60)}` makes the whole cell "
                        "non-Python; it was commented out")
        return "\n".join(f"# {line}" if line else "#" for line in lines)
    out = []
    for line in lines:
        text = line.lstrip()
        if text.startswith(("%", "!")):
            indent = line[: len(line) - len(text)]
            out.append(f"{indent}pass  # {text}" if indent else f"# {text}")
            warnings.append(f"{where}: `{_label(text, 60)}` is an IPython magic or shell "
                            "command, not Python; it was commented out")
        else:
            out.append(line)
    return "\n".join(out)


def _hoist_future(code: str) -> tuple[str, list[str]]:
    """`code` with its `from __future__ import ...` statements commented out in place (the
    cell keeps its line count), and those statements: Python takes them only at the top of a
    module, and Jupyter takes them in any cell."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return code, []  # the module's import reports the error, with its cell
    lines = code.split("\n")
    taken: list[str] = []
    spans = [(n.lineno, n.end_lineno or n.lineno) for n in tree.body]
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        shared = sum(1 for a, b in spans if a <= last and b >= first) > 1  # `...; x = 1`
        if shared or node.col_offset:
            continue
        taken.append(ast.get_source_segment(code, node) or "")
        for i in range(first - 1, last):
            lines[i] = f"# (moved to the top of the module) {lines[i]}"
    return "\n".join(lines), [t for t in taken if t]


def _first_line(code: str) -> str:
    return next((_label(line.strip(), 50) for line in code.splitlines() if line.strip()), "")


def _nbgrader_meta(cell: dict) -> dict:
    metadata = cell.get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def _bound_names(node: ast.stmt) -> list[str]:
    """Top-level names one statement binds (functions, classes, imports, assignments)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def _defined_names(code: str) -> list[str]:
    """Top-level names a piece of code defines, in order."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    return list(dict.fromkeys(name for node in tree.body for name in _bound_names(node)))


def _left_out_note(where: str, names: list[str], used: set[str]) -> str:
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if names[6:] else "")
    needed = [n for n in names if n in used]
    return (f"{where} defines {shown}, which {'was' if len(names) == 1 else 'were'} left out"
            + (f" although your graded code uses {', '.join(needed[:6])}" if needed else "")
            + f": to keep a helper, {HOW_TO_KEEP}")


def _used_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def convert_notebook(notebook: Path, module: str, functions: list[str] | None = None,
                     max_bytes: int = MAX_NOTEBOOK_BYTES) -> Converted:
    """`module`.py's source from the notebook's solution cells and locked code cells, in notebook
    order, as the grader grades it. Locked nbgrader grade cells (tests) and cells the student
    added are left out (importing the module runs neither); a cell left out that defines
    something is named in a note. Every problem is a NotebookProblem for the student."""
    name = _label(notebook.name)
    if notebook.stat().st_size > max_bytes:
        raise NotebookProblem(f"{name} is larger than {max_bytes // 2**20} MiB; clear its "
                              f"outputs (Kernel > Restart & Clear Output) or submit {module}.py")
    try:
        data = json.loads(notebook.read_bytes().decode("utf-8-sig"))
    except RecursionError:  # absurdly nested JSON: refused, never a crash
        raise NotebookProblem(f"{name} is not a valid notebook: its JSON is nested too deeply") \
            from None
    except UnicodeDecodeError:
        raise NotebookProblem(f"{name} is not a valid notebook: it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise NotebookProblem(
            f"{name} is not a valid notebook: it is not valid JSON ({exc.msg} at line "
            f"{exc.lineno}, column {exc.colno}); download it again from Jupyter (File > "
            f"Download) or submit {module}.py") from None
    except ValueError:  # int() refuses numbers over 4,300 digits
        raise NotebookProblem(f"{name} is not a valid notebook: its JSON holds a number too "
                              f"long to read; download it again from Jupyter (File > Download) "
                              f"or submit {module}.py") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list) or data.get("nbformat") != 4:
        raise NotebookProblem(f"{name} is not a Jupyter notebook in format 4 (no list of "
                              f"cells); download it again from Jupyter (File > Download) or "
                              f"submit {module}.py")
    warnings: list[str] = []
    parts: list[tuple[str, int, str, str]] = []  # (where, cell number, code, its first line)
    futures: list[str] = []
    solutions = 0
    left_out: list[tuple[str, list[str]]] = []
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = _nbgrader_meta(cell)
        solution = meta.get("solution") is True
        grade_id = meta.get("grade_id")
        # The label is the student's to write: one short inert line (it also heads a comment).
        where = f"{name}, cell {number}" + (f" ({_label(str(grade_id), 60)})" if grade_id else "")
        if not (solution or (meta.get("locked") is True and meta.get("grade") is not True)):
            if meta.get("grade") is not True:  # a cell of the student's own
                names = _defined_names(_comment_magics(_cell_source(cell), where, []))
                if names:
                    left_out.append((f"{name}, cell {number} (added by you)", names))
            continue
        solutions += solution
        code = _comment_magics(_cell_source(cell).strip("\n"), where, warnings)
        first = _first_line(code)
        code, hoisted = _hoist_future(code)
        futures += [f for f in hoisted if f not in futures]
        parts.append((where, number, code, first))
    if not solutions:
        raise NotebookProblem(
            f"{name} has no solution cells (cells with nbgrader solution metadata): write your "
            f"code in the function cells of the notebook you were given, which carry that "
            f"metadata (do not copy it into new cells), or submit {module}.py instead")
    header = (f"# {module}.py, extracted by the autograder from {name}: its solution cells and "
              "locked code cells, in notebook order.\n")
    if futures:
        header += "".join(f"{f}  # from a cell below\n" for f in futures)
    chunks, cell_map = [], []
    line = header.count("\n") + 1  # where the next chunk starts
    for where, number, code, first in parts:
        chunk = f"# --- {where}\n{code}\n"
        cell_map.append([line + 1, number, first])
        chunks.append(chunk)
        line += chunk.count("\n") + 2  # and the two blank lines between chunks
    source = header + "\n\n".join(chunks)
    used, kept = _used_names(source), set(_defined_names(source))
    notes = [_left_out_note(where, [n for n in names if n not in kept], used)
             for where, names in left_out if set(names) - kept]
    return Converted(source, _bounded(notes + warnings),
                     UNTOUCHED if module_state(source, functions) != EDITED else EDITED,
                     cell_map)


def _is_stub(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body that does nothing but (after its docstring) `raise NotImplementedError(...)`,
    `pass` or `...`: the template's stub, whatever its message or formatting."""
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body.pop(0)
    for statement in body:
        if isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
                and statement.value.value is Ellipsis:
            continue
        if isinstance(statement, ast.Raise) and statement.exc is not None:
            exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                continue
        return False
    return True


def _top_level(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def stub_functions(source: str | bytes,
                   functions: list[str] | None = None) -> dict[str, range | None]:
    """Which of `functions` (every top-level function when None) the module defines as the
    template's stub (`_is_stub`), in order, each with its lines; none when it does not parse."""
    try:
        defined = _top_level(ast.parse(source))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    return {n: range(defined[n].lineno, (defined[n].end_lineno or defined[n].lineno) + 1)
            for n in (functions if functions else defined)
            if n in defined and _is_stub(defined[n])}


def module_state(source: str | bytes, functions: list[str] | None = None) -> str:
    """UNTOUCHED when the module is still the template's stub: each of `functions` (every
    top-level function when None) that it defines does nothing but raise NotImplementedError
    (or pass), whatever the formatting, messages or added comments and imports; an empty file
    too. EDITED when one of them has a body of its own or is bound some other way, or when the
    file defines none of them (it is not the template). A file that does not parse is EDITED:
    that is the student's code, and its error is theirs to see."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return EDITED
    defined = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined[node.name] = node
        elif functions and set(_bound_names(node)) & set(functions):
            return EDITED  # an API name bound some other way (assigned, imported, a class)
    names = [n for n in (functions if functions else defined) if n in defined]
    if any(not _is_stub(defined[n]) for n in names):
        return EDITED
    # Stubs of the template (or an empty file); a file without any of them is something else.
    return UNTOUCHED if names or not tree.body else EDITED


def choose_graded(module: str, module_file: str | None, module_state_: str | None,
                  notebook_file: str | None, notebook_state: str | None,
                  notebook_problem: str | None = None) -> tuple[str | None, str | None]:
    """Which file the grader grades, and why (None when there was no choice): the module,
    unless it is missing or still the template's stub and a notebook holds the code."""
    py = _label(module_file or f"{module}.py")
    nb = _label(notebook_file) if notebook_file else None
    if notebook_file is None:
        return module_file, None
    if module_file is None:
        why = f"there is no {module}.py, so {nb} was converted to {module}.py and graded"
        return notebook_file, why + (f"; it could not be converted: {notebook_problem}"
                                     if notebook_problem else "")
    if module_state_ == UNTOUCHED and notebook_problem:
        return notebook_file, (f"{py} is still the template's stub (no function implemented), "
                               f"so {nb} was to be graded, but it could not be converted: "
                               f"{notebook_problem}")
    if module_state_ == UNTOUCHED and notebook_state == EDITED:
        return notebook_file, (f"{py} is still the template's stub (no function implemented), "
                               f"so your notebook {nb} was converted to {module}.py and graded")
    if module_state_ == UNTOUCHED:
        return module_file, (f"{py} and {nb} are both the template unchanged: nothing is "
                             f"implemented yet; {py} was graded")
    if notebook_state == EDITED:
        return module_file, (f"BOTH {py} and {nb} hold code: {py} was graded and the notebook "
                             f"was IGNORED. If your work is in the notebook, submit the notebook "
                             f"without {py} (or with {py} as the template gave it)")
    return module_file, (f"{py} was graded ({nb} "
                         + ("could not be read" if notebook_problem else
                            "is the template unchanged") + ", so it was ignored)")


# ----------------------------------------------------------------------------- the answers


@dataclass
class DuplicateAnswer:
    """A question id given more than once in the file: ambiguous, so that question is invalid."""

    values: list[Any]
    lines: list[int | None]


def answers_loader() -> type:
    """The one YAML loader of answers files: check.py's and the grader's (which imports it), so
    both read every file the same way. A SafeLoader that records a question id given twice
    (a DuplicateAnswer) instead of keeping the last, refuses aliases (an answers file never needs
    them, and nested ones, "billion laughs", would expand exponentially) and numbers too long
    for int()."""
    import yaml

    class AnswersLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.events.AliasEvent):
                raise yaml.composer.ComposerError(
                    None, None, "YAML aliases (*name) are not allowed in an answers file",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)

        def construct_yaml_int(self, node: Any) -> int:
            try:
                return super().construct_yaml_int(node)
            except ValueError:  # over int()'s 4,300 digits: no answer is a number anyway
                raise yaml.constructor.ConstructorError(
                    None, None, "this number is too long to read; answers are letters, e.g. B",
                    node.start_mark) from None

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            if not isinstance(node, yaml.MappingNode):
                raise yaml.constructor.ConstructorError(
                    None, None, f"expected a mapping node, but found {node.id}",
                    node.start_mark)
            self.flatten_mapping(node)
            mapping: dict[Any, Any] = {}
            first_line: dict[Any, int] = {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, Hashable):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        "a question id must be plain text", key_node.start_mark)
                value = self.construct_object(value_node, deep=deep)
                line = key_node.start_mark.line + 1
                if key not in mapping:
                    mapping[key], first_line[key] = value, line
                    continue
                previous = mapping[key]
                if not isinstance(previous, DuplicateAnswer):
                    previous = DuplicateAnswer([previous], [first_line[key]])
                previous.values.append(value)
                previous.lines.append(line)
                mapping[key] = previous
            return mapping

    AnswersLoader.add_constructor("tag:yaml.org,2002:int", AnswersLoader.construct_yaml_int)
    return AnswersLoader


def load_answers_file(path: Path) -> tuple[dict[Any, Any], str | None]:
    """The answers as a mapping, or a problem with the file as a whole."""
    import yaml

    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return {}, f"{path.name} is not UTF-8 text (bad byte at offset {exc.start})"
    try:
        if path.suffix == ".json":
            def hook(items: list[tuple[str, Any]]) -> dict[str, Any]:
                out: dict[str, Any] = {}
                for key, value in items:
                    out[key] = DuplicateAnswer([out[key], value], [None, None]) \
                        if key in out else value
                return out

            data = json.loads(text, object_pairs_hook=hook)
        else:
            data = yaml.load(text, Loader=answers_loader())  # a SafeLoader: no Python objects
    except json.JSONDecodeError as exc:
        return {}, f"{path.name} line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return {}, (f"{path.name}{where} not valid YAML: {problem} (check the indentation, "
                    "and that each line reads `question_id: B` or `question_id: [A, C]`)")
    except (ValueError, RecursionError):  # a number over 4,300 digits, nesting too deep
        return {}, (f"{path.name} holds a number too long or nesting too deep to read; each "
                    "line should read `question_id: B` or `question_id: [A, C]`")
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return {}, (f"{path.name} must map question ids to answers (`question_id: B`), "
                    f"but it holds {type(data).__name__} at the top level")
    return data, None


def _letters(prop: dict[str, Any]) -> list[str]:
    if "items" in prop:
        return list(prop["items"]["enum"])
    return [x for x in prop.get("enum", []) if x is not None]


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool)) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def normalise(prop: dict[str, Any], value: Any) -> Any:
    """An answer as the grader reads it, for a question of the answers schema (`prop`)."""
    return normalise_letters(value, multiple="items" in prop)


def normalise_letters(value: Any, multiple: bool) -> Any:
    """Letters stripped and upper-cased; one letter <-> a list of one as the question expects
    (`multiple`: select all that apply); null, "" and [] mean unanswered (None). Anything else
    that is not a letter is returned as it is, for the schema to reject with a precise message.
    The grader normalises with this same function."""
    if isinstance(value, str):
        value = value.strip().upper()
    elif isinstance(value, list):
        value = [x.strip().upper() if isinstance(x, str) else x for x in value]
    if value in (None, "", []):
        return None
    if multiple and isinstance(value, str) and len(value) == 1:
        return [value]
    if not multiple and isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


def answer_problem(prop: dict[str, Any], value: Any) -> str | None:
    """Why a normalised, non-empty answer does not fit its question; None when it does."""
    import jsonschema

    letters = _letters(prop)
    span = f"{letters[0]}-{letters[-1]}" if letters else "the options"
    if "items" in prop:  # select all that apply
        if isinstance(value, str):
            hint = f"[{', '.join(value)}]" if value.isalpha() else "[A, C]"
            return (f"select all that apply: give a list of letters, e.g. {hint}, not the text "
                    f"{_show(value)}")
        if not isinstance(value, list):
            return (f"select all that apply: expected a list of letters from {span}, "
                    f"got {_show(value)}")
        for item in value:
            if not isinstance(item, str):
                return f"{_show(item)} in the list is not a letter from {span}"
            if item not in letters:
                return f"{_show(item)} is not one of the options {span}"
        repeated = sorted({x for x in value if value.count(x) > 1})
        if repeated:
            return f"lists {', '.join(repeated)} more than once"
    else:
        if isinstance(value, list):
            return (f"takes exactly one letter from {span}, but got several: "
                    f"{', '.join(map(str, value))}")
        if not isinstance(value, str):
            return f"expected one letter from {span}, got {_show(value)}"
        if value not in letters:
            return f"{_show(value)} is not one of the options {span}"
    # A safety net for anything the schema says that the checks above do not.
    validator = jsonschema.Draft202012Validator(prop)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return None if error is None else f"not a valid answer ({error.message})"


def check_answers(folder: Path, schema_path: Path) -> Section:
    found = [folder / n for n in ANSWER_FILE_NAMES if (folder / n).is_file()]
    section = Section(found[0].name if found else "answers.yml")
    try:
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
        properties: dict[str, dict[str, Any]] = schema["properties"]
    except (OSError, ValueError, KeyError) as exc:
        section.problems.append(f"cannot read the answers schema {schema_path.name} ({exc}); "
                                "unzip the assignment again to get it back")
        return section
    if not found:
        section.problems.append("no answers.yml found (the assignment comes with one: copy it "
                                "back from the zip and fill it in)")
        return section
    if len(found) > 1:
        section.notes.append(f"several answers files ({', '.join(p.name for p in found)}): the "
                             f"grader reads {found[0].name} only")
    answers, problem = load_answers_file(found[0])
    if problem:
        section.problems.append(problem)
        return section
    for key in answers:
        if not (isinstance(key, str) and key in properties):
            close = difflib.get_close_matches(str(key), list(properties), n=1)
            section.problems.append(
                f"unknown question id {str(key)!r}" + (f" (did you mean {close[0]!r}?)"
                                                        if close else "")
                + ": the grader would ignore this answer")
    unanswered = []
    for qid, prop in properties.items():
        title = prop.get("title", qid)
        raw = answers.get(qid)
        if isinstance(raw, DuplicateAnswer):
            where = " and ".join(f"line {n}" for n in raw.lines if n)
            section.problems.append(f"{title}: answered more than once"
                                    + (f" ({where})" if where else "") + "; keep one")
            continue
        value = normalise(prop, raw)
        if value is None:
            unanswered.append(qid)
            continue
        problem = answer_problem(prop, value)
        if problem:
            section.problems.append(f"{title}: {problem}")
    answered = len(properties) - len(unanswered)
    section.lines.append(f"{answered} of {len(properties)} questions answered "
                         "(checked for form only: whether they are right is the grader's call)")
    if not unanswered:
        section.lines.append("all answered")
    elif len(unanswered) == len(properties):
        section.todo.append("no question is answered yet")
        section.notes.append(f"no question is answered yet (each scores 0 as it is): replace "
                             f"the `null` after each id in {section.title}")
    else:
        section.todo.append(f"{len(unanswered)} question(s) not answered yet")
        section.notes.append(f"not answered yet: {', '.join(unanswered)} (each scores 0 as "
                             "it is)")
    return section


# ----------------------------------------------------------------------------- public tests


@dataclass
class TestCase:
    name: str
    outcome: str  # passed | failed | skipped
    message: str = ""
    collection: bool = False  # an error while collecting (importing) the tests
    error: str | None = None  # the exception's class, from pytest's crash location
    at: tuple[str, int] | None = None  # the crash location's file name and line

    def raised_in(self, stubs: dict[str, range | None], file: str) -> bool:
        """Whether this failure is a NotImplementedError raised by one of `stubs` (a function's
        lines in `file`; None: anywhere)."""
        if self.error != "NotImplementedError":
            return False
        return any(lines is None or (self.at is not None and self.at[0] == file
                                     and self.at[1] in lines) for lines in stubs.values())


def parse_junit(path: Path) -> list[TestCase]:
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        outcome, message, collection, error, at = "passed", "", False, None, None
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = child.get("message") or ""
                text = child.text or ""
                # The traceback's "E   Error: ..." lines say more than "collection failure".
                detail = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
                if detail and (not message or "collection failure" in message):
                    message = detail[-1]
                collection = not case.get("classname")
                lines = text.strip().splitlines()
                crash = _CRASH_LINE.match(lines[-1].strip()) if lines else None
                if crash:
                    error = crash.group("type").rsplit(".", 1)[-1]
                    at = (Path(crash.group("path")).name, int(crash.group("line")))
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message") or ""
        cases.append(TestCase(name, outcome, message.strip(), collection, error, at))
    return cases


def run_public_tests(folder: Path, tests_dir: Path, module: str,
                     timeout: float = TESTS_TIMEOUT_S, module_dir: Path | None = None) -> Section:
    """The public tests on `module`.py in `module_dir` (default: `folder`)."""
    section = Section("public tests")
    if not tests_dir.is_dir() or not any(tests_dir.glob("test_*.py")):
        section.notes.append(f"no public tests found in {tests_dir}")
        return section
    with tempfile.TemporaryDirectory(prefix="check-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", str(tests_dir), "-q", "-p", "no:cacheprovider",
                   f"--junitxml={report}", "-o", "junit_family=xunit2", "--rootdir", str(folder)]
        # No __pycache__ left in the student's folder; conftest finds the module via *_DIR too.
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
               f"{module.upper()}_DIR": str(module_dir or folder)}
        try:
            proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            section.problems.append(f"the public tests did not finish within {timeout:g} s "
                                    "(an endless loop, or a process group never destroyed?)")
            return section
        cases = parse_junit(report) if report.is_file() else []
    if not cases:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        section.problems.append(f"pytest could not run the public tests (exit {proc.returncode}):"
                                f"\n{tail}")
        return section
    path = (module_dir or folder) / f"{module}.py"
    source = path.read_bytes() if path.is_file() else b""
    summarise_tests(section, cases, module, stub_functions(source, FUNCTIONS))
    return section


def summarise_tests(section: Section, cases: list[TestCase], module: str,
                    stubs: dict[str, range | None]) -> None:
    """Section lines for the public tests' `cases`: one line naming the functions that are
    still the template's `stubs` (read from the code, never from messages: each with its lines
    in `module`.py), in place of each failure that is theirs, then every other failure."""
    ran = [c for c in cases if c.outcome != "skipped"]
    passed = [c for c in ran if c.outcome == "passed"]
    section.lines.append(f"{len(passed)} of {len(ran)} passed"
                         + (f", {len(cases) - len(ran)} skipped" if len(ran) < len(cases) else ""))
    for case in ran:
        if case.outcome == "passed" or case.raised_in(stubs, f"{module}.py"):
            continue
        if case.collection:
            section.problems.append(f"the tests could not import {module}.py: {case.message}")
        else:
            first = case.message.splitlines()[0] if case.message else "failed"
            section.problems.append(f"{case.name}: {first[:300]}")
    if stubs:
        section.problems.insert(0, f"not implemented yet: {', '.join(stubs)}")
    for case in cases:
        if case.outcome == "skipped" and case.message:
            section.notes.append(f"{case.name} skipped: {case.message}")


# ----------------------------------------------------------------------------- the command


def guess_module(folder: Path) -> str | None:
    """The student's module when there is no doubt: the only .py file next to check.py."""
    candidates = [p.stem for p in folder.glob("*.py")
                  if p.name != "check.py" and not p.name.startswith(("test_", "conftest"))]
    if len(candidates) == 1:
        return candidates[0]
    return folder.name if folder.name in candidates else None


def render(sections: list[Section]) -> str:
    out = []
    for s in sections:
        mark = "PROBLEM" if s.problems else "ok"
        out.append(f"{s.title}: {mark}" + (f" - {'; '.join(s.lines)}" if s.lines else ""))
        out += [f"  - {p}".replace("\n", "\n    ") for p in s.problems]
        out += [f"  note: {n}" for n in s.notes]
    return "\n".join(out)


def check_folder(folder: Path, module: str, schema: Path, tests_dir: Path,
                 run_tests: bool = True,
                 functions: list[str] | None = None) -> tuple[list[Section], int]:
    """Every check on `folder`; returns the sections and the number of problems."""
    with tempfile.TemporaryDirectory(prefix="check-") as tmp:
        code, module_dir = check_code(folder, module, functions, Path(tmp))
        sections = [code, check_answers(folder, schema)]
        if not run_tests:
            sections.append(Section("public tests", notes=["not run (--no-tests)"],
                                    todo=["the public tests were not run"]))
        elif code.problems:
            sections.append(Section("public tests", notes=[f"not run: fix {module}.py first"]))
        else:
            sections.append(run_public_tests(folder, tests_dir, module, module_dir=module_dir))
    return sections, sum(len(s.problems) for s in sections)


def verdict(sections: list[Section], problems: int, module: str) -> str:
    """The last line: problems to fix, what is not done yet, or all checks passed."""
    if problems:
        return f"{problems} problem(s) to fix before you submit."
    todo = [t for s in sections for t in s.todo]
    if todo:
        return (f"No problems found in what was checked, but not everything is done or checked "
                f"yet: {'; '.join(todo)}.")
    return (f"All checks passed. Submit {sections[0].lines[0].removeprefix('graded file: ')}"
            if sections[0].lines and sections[0].lines[0].startswith("graded file: ")
            else f"All checks passed. Submit {module}.py") + (
        " and your answers file. The grader runs many more tests than the public ones: passing "
        "these is a start, not a guarantee.")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default=".", type=Path,
                        help="the assignment folder (default: the current folder)")
    parser.add_argument("--module", default=MODULE, help="the module to check, e.g. hw1")
    parser.add_argument("--schema", type=Path, help=f"default: FOLDER/{SCHEMA_NAME}")
    parser.add_argument("--tests", type=Path, help="public tests folder (default: FOLDER/tests)")
    parser.add_argument("--no-tests", action="store_true", help="check the files only")
    parser.add_argument("--functions", help="the graded functions, comma-separated (default: "
                        "the assignment's, in check.py)")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    if not folder.is_dir():
        print(f"error: {folder} is not a folder", file=sys.stderr)
        return 1
    module = args.module or guess_module(folder)
    if not module:
        print("error: cannot tell which module to check; pass --module NAME", file=sys.stderr)
        return 1
    functions = [f for f in args.functions.split(",") if f] if args.functions else FUNCTIONS
    print(f"Checking {folder} (no answer key involved)\n")
    sections, problems = check_folder(folder, module, args.schema or folder / SCHEMA_NAME,
                                      args.tests or folder / "tests", not args.no_tests,
                                      list(functions) if functions else None)
    print(render(sections))
    print(f"\n{verdict(sections, problems, module)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
