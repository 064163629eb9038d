"""`autograder new`: an assignment that validates, releases and tests right away, in a copy.

The project is copied (without .venv and build outputs) to a temporary folder and every command
runs there, with that folder as the working folder and AUTOGRADER_ROOT, so nothing touches this
tree. The released student folder's own `pytest tests` runs too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from autograder.release.scaffold import ScaffoldError, append_entry

pytestmark = pytest.mark.slow  # (first in parallel runs: tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
AUTOGRADER = Path(sys.executable).parent / "autograder"
SKIP = shutil.ignore_patterns(".venv", "__pycache__", "dist", "demo-out", "test-artifacts",
                              ".git", ".pytest_cache", ".ruff_cache", "*.pyc")


def copy_project(target: Path) -> Path:
    shutil.copytree(ROOT, target, ignore=SKIP)
    return target


def cli(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOGRADER_ROOT": str(root)}
    return subprocess.run([str(AUTOGRADER), *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_append_keeps_comments_and_other_entries(tmp_path: Path) -> None:
    config = tmp_path / "grading.yml"
    text = ("# course comment\ncourse: C\nassignments:\n  a:\n    # inner comment\n"
            "    title: A\n\n# trailing comment\n")
    config.write_text(text)
    new = append_entry(config, "b", "  b:\n    title: B\n")
    assert new.startswith("# course comment\ncourse: C\nassignments:\n  a:\n    # inner comment\n")
    assert new.endswith("    title: A\n  b:\n    title: B\n\n# trailing comment\n")
    assert set(yaml.safe_load(new)["assignments"]) == {"a", "b"}
    config.write_text("course: C\n")
    with pytest.raises(ScaffoldError):
        append_entry(config, "b", "  b:\n    title: B\n")


@pytest.mark.slow
def test_new_validate_release_in_a_copy(tmp_path: Path) -> None:
    root = copy_project(tmp_path / "course")
    before = (root / "grading.yml").read_text()
    made = cli(root, "new", "quiz")
    assert made.returncode == 0, made.stderr
    assert f"project: {root}" in made.stderr
    after = (root / "grading.yml").read_text()
    assert after.startswith(before.rstrip("\n")), "the existing text (comments too) is kept"
    assert "quiz" in yaml.safe_load(after)["assignments"]
    assert not (ROOT / "assignments" / "quiz").exists(), "the original tree is untouched"
    again = cli(root, "new", "quiz")
    assert again.returncode == 2 and "already" in again.stderr

    checked = cli(root, "validate", "quiz")
    assert checked.returncode == 0, checked.stderr
    assert "quiz: 1 question, 20 points" in checked.stdout
    assert "1 hidden test, 80 points: OK" in checked.stdout

    released = cli(root, "release", "quiz")
    assert released.returncode == 0, released.stdout + released.stderr
    for line in ("ok: reference with the full key scores 100%", "ok: template scores 0",
                 "ok: public tests pass on the reference", "ok: key snippets"):
        assert line in released.stdout, released.stdout
    assert "1 questions" not in released.stdout and "1 hidden tests" not in released.stdout

    readme = (root / "student_templates" / "quiz" / "README.md").read_text()
    assert "GPU they are" not in readme and "need a GPU" not in readme
    assert "many more than the public ones" not in readme
    assert "1 multiple-choice question:" in readme and "(20 points)" in readme
    answers = (root / "student_templates" / "quiz" / "answers.yml").read_text()
    assert "1 question, 20 points." in answers

    student = tmp_path / "student"
    with zipfile.ZipFile(root / "dist" / "quiz-student.zip") as archive:
        archive.extractall(student)
    folder = student / "quiz"
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_ROOT"}

    def pytest_here() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests"], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=300)

    blank = pytest_here()
    assert blank.returncode == 1 and "NotImplementedError" in blank.stdout, blank.stdout
    assert "ModuleNotFoundError" not in blank.stdout
    from autograder.project.markers import reference

    solution = root / "assignments" / "quiz" / "solution" / "quiz.py"
    (folder / "quiz.py").write_text(reference(solution.read_text()))
    done = pytest_here()
    assert done.returncode == 0, done.stdout


@pytest.mark.slow
def test_new_from_copies_settings(tmp_path: Path) -> None:
    root = copy_project(tmp_path / "course")
    made = cli(root, "new", "quiz2", "--from", "dp_basics", "--title", "Quiz two")
    assert made.returncode == 0, made.stderr
    data = yaml.safe_load((root / "grading.yml").read_text())["assignments"]
    for key in ("timeouts", "limits", "gpu_policy", "rank_retries", "late"):
        assert data["quiz2"][key] == data["dp_basics"][key]
    assert data["quiz2"]["title"] == "Quiz two"
    assert cli(root, "validate", "quiz2").returncode == 0
    bad = cli(root, "new", "quiz3", "--from", "nope")
    assert bad.returncode == 2 and "nope" in bad.stderr
