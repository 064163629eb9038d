"""The acceptance harness of an assignment whose mutants come from a generator script
(scripts/make_<name>_mutants.py): the submissions every such assignment is graded on, and the
checks each of their reports must pass. The test modules (test_<name>_grading.py) grade them
once, in a module-scoped fixture, and hold one small test per check.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import yaml
from acceptance import grade_all
from repo_project import REPO

from autograder.grading.results import Report
from autograder.project.assignment import Assignment, load_assignment
from autograder.project.markers import reference, strip_solutions
from autograder.release.build import key_answers

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Generated:
    """An assignment and its mutant generator."""

    assignment: Assignment
    script: Path
    generator: ModuleType

    @property
    def mutants(self) -> list[str]:
        return sorted(spec[0] for spec in self.generator.MUTANTS)

    @property
    def alts(self) -> list[str]:
        return sorted(spec[0] for spec in self.generator.ALTS)

    @property
    def partial(self) -> Path:
        return self.assignment.root / "examples" / "partial" / f"{self.module}.py"

    @property
    def module(self) -> str:
        return self.assignment.config.module

    def write_mutants(self, folder: Path) -> Path:
        written = self.generator.write_mutants(folder, self.assignment.solution.read_text())
        assert sorted(p.stem for p in written) == sorted([*self.mutants, *self.alts])
        return folder

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """The generator's command line."""
        return subprocess.run([sys.executable, str(self.script), *args], capture_output=True,
                              text=True, cwd=ROOT)

    def check_committed(self) -> None:
        """The committed partial example is what the generator writes."""
        check = self.run("--check")
        assert check.returncode == 0, check.stdout + check.stderr

    def check_writes(self, folder: Path, mutants: Path) -> None:
        """`--write` gives reviewers the very mutants that are graded."""
        run = self.run("--write", str(folder))
        assert run.returncode == 0, run.stdout + run.stderr
        written = {p.name: p.read_text() for p in folder.iterdir()}
        assert written == {p.name: p.read_text() for p in mutants.iterdir()}
        assert len(written) == len(self.mutants) + len(self.alts)

    def grade(self, base: Path, mutants: Path) -> dict[str, Report | Exception]:
        """The reference with the key, the blank template, two do-nothing modules, the
        demo's partial example and every mutant and alternative, graded."""
        source = self.assignment.solution.read_text()
        blank = strip_solutions(source)
        names = re.findall(r"^def (\w+)\(", blank, flags=re.M)
        modules = {
            "reference": reference(source), "blank": blank,
            "returns_none": "".join(f"def {n}(*args, **kwargs):\n    return None\n\n"
                                    for n in names),
            "returns_first_argument": "".join(
                f"def {n}(*args, **kwargs):\n    return args[0] if args else None\n\n"
                for n in names),
            "partial": self.partial.read_text(),
            **{p.stem: p.read_text() for p in sorted(mutants.glob("*.py"))},
        }
        folders = {}
        for name, text in modules.items():
            folder = base / "submissions" / name
            folder.mkdir(parents=True)
            (folder / f"{self.module}.py").write_text(text)
            folders[name] = folder
        (folders["reference"] / "answers.yml").write_text(
            yaml.safe_dump(key_answers(self.assignment.bank)))
        (folders["partial"] / "answers.yml").write_text(
            (self.partial.parent / "answers.yml").read_text())
        return grade_all({name: (folder, self.assignment) for name, folder in folders.items()},
                         base / "out")


def generated(name: str) -> Generated:
    script = ROOT / "scripts" / f"make_{name}_mutants.py"
    spec = importlib.util.spec_from_file_location(script.stem, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Generated(load_assignment(name, REPO), script, module)


def header(path: Path, tag: str) -> list[str]:
    return [line[len(f"# {tag}: "):].strip() for line in path.read_text().splitlines()
            if line.startswith(f"# {tag}: ")]


def part(report: Report, name: str) -> float:
    return next(p.score for p in report.parts if p.name == name)


def failed(report: Report) -> list:
    return [t for t in report.tests if t.part == "coding" and t.status == "failed"]


def check_reference(report: Report) -> None:
    assert not failed(report), [(t.name, t.message) for t in failed(report)]
    assert report.score == report.max_score == 100


def check_doing_nothing(report: Report, name: str) -> None:
    assert part(report, "coding") == 0, [t.name for t in report.tests
                                          if t.part == "coding" and t.score > 0]
    if name == "blank":
        assert report.score == 0
        ran = [t for t in report.tests if t.part == "coding" and t.status != "excluded"]
        assert {t.cause for t in ran} == {"not_implemented"}, [(t.name, t.cause) for t in ran]


def check_partial(report: Report, partial: Path) -> None:
    assert 0 < report.score < 100
    broken = {line.split(":", 1)[0] for line in header(partial, "PARTIAL")}
    assert {t.name.split(":", 1)[0] for t in failed(report)} == broken


def check_mutant(report: Report, path: Path) -> None:
    """The mutant fails the tests its header names, and only tests of its own function."""
    (line,) = header(path, "MUTANT")
    function = line.split(":", 1)[0]
    names = [t.name for t in failed(report)]
    for expected in header(path, "EXPECT_FAIL"):
        assert any(expected in n for n in names), (expected, names)
    assert all(n.startswith(f"{function}: ") for n in names), names


def check_alternative(report: Report, path: Path, coding_points: float) -> None:
    assert header(path, "ALT"), f"{path.stem} has no '# ALT:' line"
    assert not failed(report), [(t.name, t.message) for t in failed(report)]
    assert part(report, "coding") == coding_points
