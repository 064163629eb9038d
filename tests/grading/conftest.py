"""A small assignment per test, built from the toy (tests/fixtures/toy): its own hidden tests,
configuration and probes, loaded as the grader loads it."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from autograder.project.assignment import Assignment, load_assignment

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy"


@pytest.fixture
def toy() -> Path:
    return TOY


@pytest.fixture
def assignment(tmp_path: Path) -> Callable[..., Assignment]:
    """`assignment(hidden=None, config={...})`: the toy, with `hidden` as its only hidden test
    file (source text) and `config` replacing lines of its grading.yml (old text -> new)."""

    def make(hidden: str | None = None, config: dict[str, str] | None = None,
             name: str = "test_hidden.py") -> Assignment:
        course = tmp_path / "course"
        if course.exists():
            shutil.rmtree(course)
        shutil.copytree(TOY, course)
        folder = course / "assignments" / "toy" / "tests" / "hidden"
        if hidden is not None:
            for old in folder.glob("*.py"):
                old.unlink()
            (folder / name).write_text(textwrap.dedent(hidden))
        text = (course / "grading.yml").read_text()
        for old, new in (config or {}).items():
            assert old in text, old
            text = text.replace(old, new)
        (course / "grading.yml").write_text(text)
        return load_assignment("toy", course / "grading.yml")

    return make
