"""Fixtures of the batch tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from course_class import Course, graded_course


@pytest.fixture
def folder_chain() -> Iterator[Callable[[Path, int], Path]]:
    """make(root, depth): `root` holding folders d/d/... `depth` deep, toy.py at the bottom.

    Chains are removed at teardown, deepest level first: shutil.rmtree recurses, so pytest's
    own clean-up of old temporary folders would fail on a chain 999 deep."""
    made: list[Path] = []

    def make(root: Path, depth: int) -> Path:
        root.mkdir()
        made.append(root)
        folder = root
        for _ in range(depth):  # one level at a time (mkdir(parents=True) recurses)
            folder = folder / "d"
            folder.mkdir()
        (folder / "toy.py").write_text("x = 1\n")
        return root

    yield make
    for root in made:
        levels = [root]
        while (levels[-1] / "d").is_dir():
            levels.append(levels[-1] / "d")
        for folder in reversed(levels):
            for item in folder.iterdir():
                if not item.is_dir() or item.is_symlink():
                    item.unlink()
            folder.rmdir()



@pytest.fixture(scope="session")
def course(tmp_path_factory) -> Course:
    """A graded class of the toy assignment with a due date and a late policy (course_class)."""
    return graded_course(tmp_path_factory.mktemp("course"))
