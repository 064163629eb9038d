"""What a sandbox can import holds no answer: no reference logic, no verdict.

Student code runs in the same process as everything copied into its sandbox folder (the
assignment's probes and the sandbox runtime), so it can read and rewrite all of it. This test
builds a real sandbox folder, as grading does, and scans every Python file in it but the
student's own module for the reference solution's function bodies (whole, or any three
statements in a row) and for assertions; the grader's own ranks (an assignment's observers.py)
must not be there at all.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
from repo_project import REPO

from autograder.project.assignment import load_assignment
from autograder.project.config import load_config
from autograder.project.markers import reference
from autograder.sandbox.folder import prepare_sandbox_dir

ASSIGNMENTS = tuple(load_config(REPO))
WINDOW = 3  # statements in a row that would already be a piece of the reference's logic


class _Renamed(ast.NodeTransformer):
    """Variables renamed away: a copy with other names is the same logic."""

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.arg:
        return ast.copy_location(ast.arg(arg="_"), node)


def _normalised(statements: list[ast.stmt]) -> list[str]:
    # Docstrings are prose, not logic; positions, comments and variable names do not matter.
    body = [s for s in statements
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return [ast.dump(_Renamed().visit(copy.deepcopy(s)), annotate_fields=False) for s in body]


def _windows(statements: list[str]) -> set[tuple[str, ...]]:
    if len(statements) < WINDOW:
        return {tuple(statements)} if statements else set()
    return {tuple(statements[i:i + WINDOW]) for i in range(len(statements) - WINDOW + 1)}


def _bodies(tree: ast.AST) -> list[list[str]]:
    """Every statement list in a file: function bodies, branches, loops, at any depth."""
    found = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                found.append(_normalised(value))
    return found


def reference_pieces(assignment_name: str) -> dict[str, set[tuple[str, ...]]]:
    solution = load_assignment(assignment_name, REPO).solution
    tree = ast.parse(reference(solution.read_text()))
    return {node.name: _windows(_normalised(node.body)) for node in tree.body
            if isinstance(node, ast.FunctionDef)}


def sandbox_files(assignment_name: str, tmp_path: Path) -> list[Path]:
    assignment = load_assignment(assignment_name, REPO)
    student = tmp_path / "student.py"
    student.write_text("")
    folder = prepare_sandbox_dir(student, assignment.config.module, assignment.probes, tmp_path)
    return sorted(p for p in folder.rglob("*.py") if p.name != f"{assignment.config.module}.py")


@pytest.mark.parametrize("assignment_name", ASSIGNMENTS)
def test_no_reference_logic_is_importable_in_the_sandbox(assignment_name: str,
                                                         tmp_path: Path) -> None:
    pieces = reference_pieces(assignment_name)
    files = sandbox_files(assignment_name, tmp_path)
    assert any(p.name == "probes.py" for p in files) and len(files) > 3
    # The grader's own ranks (observers.py) check collectives against the reference's
    # arithmetic: they run in the grader's processes only.
    assert not any(p.name == "observers.py" for p in files)
    for path in files:
        tree = ast.parse(path.read_text())
        seen = set().union(*(_windows(body) for body in _bodies(tree)))
        for function, windows in pieces.items():
            shared = windows & seen
            assert not shared, (f"{path.name} holds {len(shared)} piece(s) of the reference's "
                                f"{function}: {shared}")


@pytest.mark.parametrize("assignment_name", ASSIGNMENTS)
def test_probes_hold_no_verdict(assignment_name: str, tmp_path: Path) -> None:
    for path in sandbox_files(assignment_name, tmp_path):
        asserts = [n.lineno for n in ast.walk(ast.parse(path.read_text()))
                   if isinstance(n, ast.Assert)]
        assert not asserts, f"{path.name} asserts at lines {asserts}: verdicts belong in tests"


def test_the_scan_finds_a_planted_piece(tmp_path: Path) -> None:
    # The scan is real: a probe holding three statements of the reference is caught.
    tree = ast.parse(reference(load_assignment("dp_basics", REPO).solution.read_text()))
    step = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                and n.name == "ddp_train_step")
    planted = ast.unparse(ast.Module(body=step.body[:WINDOW + 1], type_ignores=[]))
    windows = set().union(*(_windows(b) for b in _bodies(ast.parse(planted))))
    assert windows & reference_pieces("dp_basics")["ddp_train_step"]
