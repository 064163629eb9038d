"""The grader's own class names (grade.internal_names): parsed once per version of its files."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from autograder.grading import grade


def test_class_names_are_parsed_once_and_an_edit_is_seen(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    probes = tmp_path / "probes.py"
    probes.write_text("class Holder:\n    pass\n")
    (hidden / "test_a.py").write_text("class TinyMLP:\n    pass\n")
    (hidden / "test_b.py").write_text("def test_x():\n    pass\n")
    assignment = SimpleNamespace(probes=probes, hidden_tests=hidden)
    parsed: list[str] = []
    real_parse = ast.parse

    def counting(source: str, *args: object, **kwargs: object) -> ast.AST:
        parsed.append(source)
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(grade.ast, "parse", counting)
    assert grade.internal_names(assignment) == ["Holder", "TinyMLP"]
    assert grade.internal_names(assignment) == ["Holder", "TinyMLP"]
    assert len(parsed) == 3  # each file once, for both gradings
    (hidden / "test_b.py").write_text("class Scenario:\n    pass\n")  # another size
    assert grade.internal_names(assignment) == ["Holder", "TinyMLP", "Scenario"]
    (hidden / "test_a.py").unlink()
    assert grade.internal_names(assignment) == ["Holder", "Scenario"]


def test_an_unreadable_or_broken_file_is_left_out(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_broken.py").write_text("class (:\n")
    assignment = SimpleNamespace(probes=tmp_path / "missing_probes.py", hidden_tests=hidden)
    assert grade.internal_names(assignment) == []
