"""A copy of the toy course (tests/fixtures/toy) with its own hidden tests, configuration and
probes, loaded as the grader loads it: `toy_course(folder, hidden, config, name, probes)`; and
the fixtures the grading and runner tests share (`toy`, `assignment`), which their conftest.py
files import."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from autograder.project.assignment import Assignment, load_assignment
from autograder.project.paths import Project

TOY = Path(__file__).resolve().parent / "fixtures" / "toy"


def toy_course(course: Path, hidden: str | None = None, config: dict[str, str] | None = None,
               name: str = "test_hidden.py", probes: str | None = None) -> Assignment:
    """A copy of the toy at `course` (replaced if there), with `hidden` as its only hidden test
    file (source text), `config` replacing lines of its grading.yml (old text -> new) and
    `probes` as its probes.py (source text), loaded."""
    if course.exists():
        shutil.rmtree(course)
    shutil.copytree(TOY, course)
    folder = course / "assignments" / "toy" / "tests" / "hidden"
    if hidden is not None:
        for old in folder.glob("*.py"):
            old.unlink()
        (folder / name).write_text(textwrap.dedent(hidden))
    if probes is not None:
        (course / "assignments" / "toy" / "probes.py").write_text(textwrap.dedent(probes))
    text = (course / "grading.yml").read_text()
    for old, new in (config or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    (course / "grading.yml").write_text(text)
    return load_assignment("toy", Project.of_config(course / "grading.yml"))


@pytest.fixture
def toy() -> Path:
    return TOY


@pytest.fixture
def assignment(tmp_path: Path) -> Callable[..., Assignment]:
    """`assignment(hidden=None, config={...}, probes=None)`: the toy, with `hidden` as its only
    hidden test file (source text), `config` replacing lines of its grading.yml (old text ->
    new) and `probes` as its probes.py."""

    def make(hidden: str | None = None, config: dict[str, str] | None = None,
             name: str = "test_hidden.py", probes: str | None = None) -> Assignment:
        return toy_course(tmp_path / "course", hidden, config, name, probes)

    return make
