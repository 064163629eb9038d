"""`autograder generate [--check]`: every generated file the project commits, in one command.

Run as an instructor runs it, on a copy of this project in a temporary folder (never the real
tree): the templates with their answers schemas, the timings, docs/grading.md, and the files of
grading.yml's `generators` (the demos' partial examples).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# What a project holds: its config, sources, committed generated files and generator scripts.
PROJECT = ["grading.yml", "Makefile", "assignments", "schemas", "docs", "student_templates",
           *yaml.safe_load((ROOT / "grading.yml").read_text())["generators"]]
# One committed generated file of each kind, and how to spoil it.
EDITS = {
    "student_templates/dp_basics/answers.schema.json": lambda t: t.replace('"B"', '"Z"', 1),
    "student_templates/ddp_training/ddp_training.py": lambda t: t + "\n# edited by hand\n",
    "docs/grading.md": lambda t: t.replace("| `course` |", "| `courses` |"),
    "assignments/dp_basics/examples/partial/dp_basics.py": lambda t: t.replace(
        "# A DELIBERATELY FLAWED", "# A FLAWED"),
    "assignments/ddp_training/examples/partial/answers.yml": lambda t: t + "q01: A\n",
}


def autograder(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_ROOT"}
    return subprocess.run([sys.executable, "-m", "autograder.cli", *args, "--root", str(project)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    for name in PROJECT:
        source, target = ROOT / name, copy / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return copy


def snapshot(project: Path) -> dict[str, bytes]:
    return {str(p.relative_to(project)): p.read_bytes() for p in sorted(project.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_the_committed_generated_files_are_up_to_date() -> None:
    """What CI runs on the real tree (reading only): a source changed without `generate`."""
    result = autograder(ROOT, "generate", "--check")
    assert result.returncode == 0, result.stderr
    assert "generated files up to date" in result.stdout


def test_generate_check_lists_every_stale_file_and_generate_writes_them(project: Path) -> None:
    fresh = autograder(project, "generate", "--check")
    assert fresh.returncode == 0, fresh.stderr
    assert "generated files up to date" in fresh.stdout

    originals = {name: (project / name).read_text() for name in EDITS}
    for name, spoil in EDITS.items():
        spoiled = spoil(originals[name])
        assert spoiled != originals[name], name
        (project / name).write_text(spoiled)
    (project / "student_templates" / "dp_basics" / "notes.txt").write_text("stale")
    before = snapshot(project)

    stale = autograder(project, "generate", "--check")

    assert stale.returncode == 1, stale.stdout + stale.stderr
    listed = [line.split(":", 1)[0] for line in stale.stderr.splitlines()
              if not line.startswith(("project:", "6 generated"))]
    assert sorted(listed) == sorted([*EDITS, "student_templates/dp_basics/notes.txt"]), \
        stale.stderr
    assert "6 generated file(s) out of date: run `autograder generate`" in stale.stderr
    assert snapshot(project) == before, "--check writes nothing"

    written = autograder(project, "generate")

    assert written.returncode == 0, written.stdout + written.stderr
    assert {name: (project / name).read_text() for name in EDITS} == originals
    assert not (project / "student_templates" / "dp_basics" / "notes.txt").exists()
    assert autograder(project, "generate", "--check").returncode == 0


def test_a_schema_edit_makes_the_docs_stale(project: Path) -> None:
    schema = project / "schemas" / "grading.schema.json"
    data = json.loads(schema.read_text())
    data["properties"]["course"]["description"] = "The course's name, shown in reports."
    schema.write_text(json.dumps(data, indent=2))

    result = autograder(project, "generate", "--check")

    assert result.returncode == 1
    assert "docs/grading.md: differs from what schemas/grading.schema.json gives" in result.stderr
    assert autograder(project, "generate").returncode == 0
    assert "The course's name, shown in reports." in (project / "docs" / "grading.md").read_text()


def test_changed_hidden_tests_make_the_timings_stale(project: Path) -> None:
    hidden = sorted((project / "assignments" / "dp_basics" / "tests" / "hidden").glob("test_*.py"))
    hidden[0].write_text(hidden[0].read_text() + "\n# a new comment\n")

    checked = autograder(project, "generate", "--check", "-a", "dp_basics")
    written = autograder(project, "generate", "-a", "dp_basics")

    assert checked.returncode == 1
    assert "assignments/dp_basics/timings.json was recorded with other hidden tests" \
        in checked.stderr
    # Only `autograder release` grades the reference to record them: generate says so.
    assert written.returncode == 1
    assert "assignments/dp_basics/timings.json" in written.stderr


def test_a_missing_or_failing_generator_fails(project: Path) -> None:
    config = project / "grading.yml"
    data = yaml.safe_load(config.read_text())
    data["generators"] = ["scripts/make_mutants.py", "scripts/gone.py", "scripts/broken.py"]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    (project / "scripts" / "broken.py").write_text("raise SystemExit('cannot read the sources')\n")

    result = autograder(project, "generate", "--check")

    assert result.returncode == 1
    assert "scripts/gone.py: no such generator (grading.yml's generators)" in result.stderr
    assert "scripts/broken.py failed (exit 1): cannot read the sources" in result.stderr
