"""A small assignment per test, built from the toy (tests/fixtures/toy): its own hidden tests,
configuration and probes, loaded as the grader loads it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from toy_course import TOY, toy_course

from autograder.project.assignment import Assignment


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
