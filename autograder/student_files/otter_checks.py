"""The public checks of an otter-grader notebook: what its `grader.check("...")` cells run.

`autograder release NAME --notebook otter` ships this file next to the otter master notebook,
with `check.py`, `answers.schema.json`, `public_tests/` and `otter_checks.json` (which public
tests check which function). The notebook's otter tests call `check_function` and
`check_answers`, so a student gets in the notebook the very feedback `python check.py` and
`autograder check` give: the public tests run with pytest and are summed up by check.py's own
functions, and the answers are checked by check.py's answers check against the schema. Nothing
here knows the key or a hidden test: otter's tests live next to the student's code.

Self-contained like check.py (the standard library, PyYAML, pytest, and check.py next to it), so
it runs in a student's Jupyter and in otter's grading image alike.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHECKS_FILE = "otter_checks.json"  # {"module": ..., "tests": {function: ["file.py::test", ...]}}
PUBLIC_TESTS = "public_tests"
SCHEMA_NAME = "answers.schema.json"
ANSWERS_FILE = "answers.yml"
ANSWERS_VARIABLE = "answers"  # the notebook's dict of answers


def _student_check() -> types.ModuleType:
    """check.py next to this file (autograder/student_files/check.py, as released)."""
    path = HERE / "check.py"
    if not path.is_file():  # inside the autograder project itself
        return importlib.import_module("autograder.student_files.check")
    name = "_otter_student_check"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up while it executes
        spec.loader.exec_module(module)
    return sys.modules[name]


def _checks(folder: Path) -> dict[str, Any]:
    return json.loads((folder / CHECKS_FILE).read_text(encoding="utf-8"))


@contextlib.contextmanager
def _notebook_as_module(name: str, module: types.ModuleType, tests_dir: Path) -> Iterator[None]:
    """`import NAME` gives the notebook's functions while the public tests run, and only then.

    The test modules are imported afresh each time: a module kept from an earlier check would
    still hold the functions as they were then, not as the student has since rewritten them.
    """

    def forget_tests() -> None:
        for key, loaded in list(sys.modules.items()):
            origin = getattr(loaded, "__file__", None)
            if origin and Path(origin).resolve().is_relative_to(tests_dir):
                del sys.modules[key]

    previous = sys.modules.get(name)
    bytecode = sys.dont_write_bytecode
    forget_tests()
    sys.modules[name] = module
    sys.dont_write_bytecode = True  # no __pycache__ left in the student's folder
    try:
        yield
    finally:
        sys.dont_write_bytecode = bytecode
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        forget_tests()


def check_function(env: dict[str, Any], function: str, folder: Path | None = None) -> None:
    """Run the public tests of `function` on the functions defined in the notebook.

    `env` is the notebook's global namespace (otter passes it to its tests). Raises
    AssertionError with check.py's summary ("not implemented yet: ...", or each failed test
    with its message) when a test fails; returns None when all pass.
    """
    import pytest

    folder = folder or HERE
    checks = _checks(folder)
    module_name: str = checks["module"]
    if function not in env:
        raise AssertionError(f"{function} is not defined: run the cell that defines it (and the "
                             "cells above it) first")
    tests: list[str] = checks["tests"].get(function, [])
    if not tests:
        return  # no public test covers it; the grader's hidden tests do
    check = _student_check()
    tests_dir = (folder / PUBLIC_TESTS).resolve()
    # The notebook's globals as the module the tests import: functions see their own globals.
    module = types.ModuleType(module_name)
    module.__dict__.update({k: v for k, v in env.items()
                            if not (k.startswith("__") and k.endswith("__"))})
    output = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="otter-check-") as tmp, \
            _notebook_as_module(module_name, module, tests_dir):
        report = Path(tmp) / "junit.xml"
        args = [*(str(tests_dir / test) for test in tests), "-q", "-p", "no:cacheprovider",
                "-p", "no:faulthandler", f"--junitxml={report}", "-o", "junit_family=xunit2",
                "--rootdir", str(tests_dir)]
        # A passing check prints nothing: otter shows the cell's output with the result.
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            exit_code = pytest.main(args)
        cases = check.parse_junit(report) if report.is_file() else []
    if not cases:
        tail = "\n".join(output.getvalue().strip().splitlines()[-15:])
        raise AssertionError(f"pytest could not run the public tests (exit {int(exit_code)}):"
                             f"\n{tail}")
    section = check.Section("public tests")
    # The check is this function's, run on the notebook's globals (no module file whose lines
    # could tell where it was raised): a NotImplementedError in its tests is its stub's.
    stub = any(c.error == "NotImplementedError" for c in cases if c.outcome == "failed")
    check.summarise_tests(section, cases, module_name, {function: None} if stub else {})
    if section.problems:
        raise AssertionError("\n".join(section.problems))


def answers_yaml(answers: Any) -> str:
    """The notebook's `answers` dict as the answers.yml the grader reads."""
    import yaml

    if not isinstance(answers, dict):
        raise AssertionError(f"`{ANSWERS_VARIABLE}` must be a dict {{question id: answer}}, not "
                             f"{type(answers).__name__}: run its cell as given, then fill it in")
    try:
        return yaml.safe_dump(dict(answers), sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        raise AssertionError(f"`{ANSWERS_VARIABLE}` may hold only None, a letter (\"B\") or a "
                             "list of letters ([\"A\", \"C\"]) for each question") from None


def check_answers(env: dict[str, Any], folder: Path | None = None) -> None:
    """check.py's answers check on the notebook's `answers`: their form only, no key.

    Raises AssertionError with one line per problem; unanswered questions are not problems.
    """
    folder = folder or HERE
    if ANSWERS_VARIABLE not in env:
        raise AssertionError(f"`{ANSWERS_VARIABLE}` is not defined: run the cell that defines it "
                             "first")
    check = _student_check()
    text = answers_yaml(env[ANSWERS_VARIABLE])
    with tempfile.TemporaryDirectory(prefix="otter-answers-") as tmp:
        (Path(tmp) / ANSWERS_FILE).write_text(text, encoding="utf-8")
        section = check.check_answers(Path(tmp), folder / SCHEMA_NAME)
    if section.problems:
        raise AssertionError("\n".join(section.problems))


def save_answers(answers: Any, path: Path | str = ANSWERS_FILE) -> None:
    """Write `answers` to answers.yml (next to the notebook): the file the grader reads."""
    path = Path(path)
    path.write_text(answers_yaml(answers), encoding="utf-8")
    answered = sum(1 for value in answers.values() if value not in (None, "", []))
    print(f"{answered} of {len(answers)} answers saved to {path.name}")
