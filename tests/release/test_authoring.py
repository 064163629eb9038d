"""docs/AUTHORING.md runs: its blocks are executed in order in a copy of the project.

Tags (the words after a fenced block's language): `sh run` is run with bash in the copy's
folder (`.venv/bin` first on PATH, AUTOGRADER_ROOT set to the copy, `set -eo pipefail`);
`file=PATH` writes the block to PATH in the copy (`append` adds it at the end); `text output`
lists lines that the `sh run` block before it must print. Any other block fails the test, so
every example in the guide is one that runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "AUTHORING.md"
BIN = Path(sys.executable).parent
SKIP = shutil.ignore_patterns(".venv", "__pycache__", "dist", "demo-out", "test-artifacts",
                              ".git", ".pytest_cache", ".ruff_cache", "*.pyc")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass
class Block:
    language: str
    tags: list[str]
    text: str
    line: int

    def tag(self, name: str) -> str | None:
        """The value of `name=value`, "" for a bare `name`, None when absent."""
        for tag in self.tags:
            key, _, value = tag.partition("=")
            if key == name:
                return value
        return None


def blocks(text: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        language, *tags = match.group(1).split()
        found.append(Block(language, tags, match.group(2),
                           text.count("\n", 0, match.start()) + 1))
    return found


def kind(block: Block) -> str | None:
    if block.language == "sh" and block.tags == ["run"]:
        return "run"
    if block.tag("file") and set(block.tags) <= {f"file={block.tag('file')}", "append"}:
        return "file"
    if block.language == "text" and block.tags == ["output"]:
        return "output"
    return None


def test_every_block_of_the_guide_is_run() -> None:
    found = blocks(GUIDE.read_text())
    assert len(found) >= 10
    untagged = [f"line {b.line}: ```{b.language} {' '.join(b.tags)}" for b in found
                if kind(b) is None]
    assert not untagged, f"blocks the test would not run: {untagged}"
    assert [kind(b) for b in found][0] == "run", "the guide starts from `autograder new`"
    for before, block in zip(found, found[1:], strict=False):
        if kind(block) == "output":
            assert kind(before) == "run", f"line {block.line}: output follows no run block"
    text = GUIDE.read_text()
    for needed in ("student.probe", "run_ranks", "per_rank", "student.simulated()",
                   "without_gpus()", "student.gpus", "drawn()", "pytest.mark.gpu", "gpu(2)",
                   "weight(", "visibility", "source", "autograder new", "validate -a",
                   "verify-key -a", "release -a", "gradescope -a", "gpu_policy"):
        assert needed in text, f"the guide does not mention {needed}"


@pytest.mark.slow
def test_the_guide_runs_in_a_copy(tmp_path: Path) -> None:
    root = tmp_path / "course"
    shutil.copytree(ROOT, root, ignore=SKIP)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    output = ""
    for block in blocks(GUIDE.read_text()):
        where = f"docs/AUTHORING.md line {block.line}"
        if kind(block) == "run":
            done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + block.text], cwd=root,
                                  env=env, capture_output=True, text=True, timeout=900)
            output = done.stdout + done.stderr
            assert done.returncode == 0, f"{where} failed:\n{output[-4000:]}"
        elif kind(block) == "file":
            path = root / block.tag("file")
            path.parent.mkdir(parents=True, exist_ok=True)
            if "append" in block.tags:
                with path.open("a", encoding="utf-8") as handle:
                    handle.write(block.text)
            else:
                path.write_text(block.text, encoding="utf-8")
        else:
            for line in block.text.strip().splitlines():
                assert line.strip() in output, f"{where}: {line.strip()!r} not printed:\n{output}"
    assert not (ROOT / "assignments" / "quiz").exists(), "the guide ran in the copy only"
    assert (root / "work" / "quiz-gradescope.zip").is_file()
    assert (root / "student_templates" / "quiz" / "quiz.py").is_file()
