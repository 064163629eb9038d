"""Check your work before you submit: run `python check.py` in your assignment folder.

It checks, without the answer key (a well-formed answer is not necessarily a right one):

1. that your module (e.g. dp_basics.py) is there and has no syntax error;
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

MODULE = 'dp_basics'  # the assignment's module name; `autograder release` sets it in check.py

ANSWER_FILE_NAMES = ("answers.yml", "answers.yaml", "answers.json")
SCHEMA_NAME = "answers.schema.json"
TESTS_TIMEOUT_S = 900
_NOT_IMPLEMENTED = re.compile(r"\b(\w+) is not implemented yet")


@dataclass
class Section:
    """The outcome of one check: lines to show, and how many of them are problems."""

    title: str
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the module


def check_module(folder: Path, module: str) -> Section:
    section = Section(f"{module}.py")
    path = folder / f"{module}.py"
    if not path.is_file():
        others = sorted(p.name for p in folder.glob("*.py") if p.name != "check.py")
        section.problems.append(
            f"{module}.py is missing" + (f" (found: {', '.join(others)}); name your file "
                                         f"{module}.py" if others else ""))
        return section
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        section.problems.append(f"{module}.py {where}: {type(exc).__name__}: {exc.msg}")
    except ValueError as exc:  # null bytes
        section.problems.append(f"{module}.py cannot be compiled: {exc}")
    except (MemoryError, RecursionError):  # thousands of nested brackets or lambdas
        section.problems.append(f"{module}.py cannot be compiled: it is nested too deeply")
    else:
        section.lines.append("found, no syntax errors")
    return section


# ----------------------------------------------------------------------------- the answers


@dataclass
class _Duplicate:
    lines: list[int]


def _loader() -> type:
    import yaml

    class AnswersLoader(yaml.SafeLoader):
        """Safe YAML loading that records a question id given twice instead of keeping one."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            self.flatten_mapping(node)
            mapping: dict[Any, Any] = {}
            lines: dict[Any, list[int]] = {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, Hashable):
                    raise yaml.constructor.ConstructorError(
                        None, None, "a question id must be plain text", key_node.start_mark)
                lines.setdefault(key, []).append(key_node.start_mark.line + 1)
                value = self.construct_object(value_node, deep=deep)
                mapping[key] = _Duplicate(lines[key]) if len(lines[key]) > 1 else value
            return mapping

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
                    out[key] = _Duplicate([]) if key in out else value
                return out

            data = json.loads(text, object_pairs_hook=hook)
        else:
            data = yaml.load(text, Loader=_loader())  # a SafeLoader: no Python objects
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
    """As the grader reads answers: letters stripped and upper-cased; one letter <-> a list of
    one as the question expects; null, "" and [] mean unanswered (None)."""
    if isinstance(value, str):
        value = value.strip().upper()
    elif isinstance(value, list):
        value = [x.strip().upper() if isinstance(x, str) else x for x in value]
    if value in (None, "", []):
        return None
    multiple = "items" in prop
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
        if isinstance(raw, _Duplicate):
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
    if unanswered:
        which = "none" if len(unanswered) == len(properties) else ", ".join(unanswered)
        section.notes.append(f"not answered yet (scores 0 as it is): {which}")
    return section


# ----------------------------------------------------------------------------- public tests


@dataclass
class TestCase:
    name: str
    outcome: str  # passed | failed | skipped
    message: str = ""
    collection: bool = False  # an error while collecting (importing) the tests


def parse_junit(path: Path) -> list[TestCase]:
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        outcome, message, collection = "passed", "", False
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
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message") or ""
        cases.append(TestCase(name, outcome, message.strip(), collection))
    return cases


def run_public_tests(folder: Path, tests_dir: Path, module: str,
                     timeout: float = TESTS_TIMEOUT_S) -> Section:
    section = Section("public tests")
    if not tests_dir.is_dir() or not any(tests_dir.glob("test_*.py")):
        section.notes.append(f"no public tests found in {tests_dir}")
        return section
    with tempfile.TemporaryDirectory(prefix="check-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", str(tests_dir), "-q", "-p", "no:cacheprovider",
                   f"--junitxml={report}", "-o", "junit_family=xunit2", "--rootdir", str(folder)]
        # No __pycache__ left in the student's folder; conftest finds the module via *_DIR too.
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", f"{module.upper()}_DIR": str(folder)}
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
    summarise_tests(section, cases, module)
    return section


def summarise_tests(section: Section, cases: list[TestCase], module: str) -> None:
    ran = [c for c in cases if c.outcome != "skipped"]
    passed = [c for c in ran if c.outcome == "passed"]
    section.lines.append(f"{len(passed)} of {len(ran)} passed"
                         + (f", {len(cases) - len(ran)} skipped" if len(ran) < len(cases) else ""))
    missing: list[str] = []
    for case in ran:
        if case.outcome == "passed":
            continue
        stub = _NOT_IMPLEMENTED.search(case.message)
        if stub:
            if stub.group(1) not in missing:
                missing.append(stub.group(1))
        elif case.collection:
            section.problems.append(f"the tests could not import {module}.py: {case.message}")
        else:
            first = case.message.splitlines()[0] if case.message else "failed"
            section.problems.append(f"{case.name}: {first[:300]}")
    if missing:
        section.problems.insert(0, f"not implemented yet: {', '.join(missing)}")
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
                 run_tests: bool = True) -> tuple[list[Section], int]:
    """Every check on `folder`; returns the sections and the number of problems."""
    sections = [check_module(folder, module), check_answers(folder, schema)]
    if run_tests and sections[0].problems:
        sections.append(Section("public tests", notes=[f"not run: fix {module}.py first"]))
    elif run_tests:
        sections.append(run_public_tests(folder, tests_dir, module))
    return sections, sum(len(s.problems) for s in sections)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default=".", type=Path,
                        help="the assignment folder (default: the current folder)")
    parser.add_argument("--module", default=MODULE, help="the module to check, e.g. dp_basics")
    parser.add_argument("--schema", type=Path, help=f"default: FOLDER/{SCHEMA_NAME}")
    parser.add_argument("--tests", type=Path, help="public tests folder (default: FOLDER/tests)")
    parser.add_argument("--no-tests", action="store_true", help="check the files only")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    if not folder.is_dir():
        print(f"error: {folder} is not a folder", file=sys.stderr)
        return 1
    module = args.module or guess_module(folder)
    if not module:
        print("error: cannot tell which module to check; pass --module NAME", file=sys.stderr)
        return 1
    print(f"Checking {folder} (no answer key involved)\n")
    sections, problems = check_folder(folder, module, args.schema or folder / SCHEMA_NAME,
                                      args.tests or folder / "tests", not args.no_tests)
    print(render(sections))
    if problems:
        print(f"\n{problems} problem(s) to fix before you submit.")
        return 1
    print(f"\nAll checks passed. Submit {module}.py and your answers file. The grader runs many "
          "more tests than the public ones: passing these is a start, not a guarantee.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
