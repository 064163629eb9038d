"""The acceptance tests of an assignment whose mutants come from a generator script
(scripts/make_<name>_mutants.py), graded by the real engine end to end: the reference with the
key scores 100, the blank template 0, do-nothing submissions 0 on coding, the demo's partial
example in between, each mutant fails the tests its header names and only tests of its own
function, and each alternative solution gets every coding point.

A test module subclasses `GeneratedAcceptance` with the assignment's NAME (a class is one unit
of work for a parallel run); every submission is graded once, by a class-scoped fixture, and
the tests only read the reports.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
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


class GeneratedAcceptance:
    """The tests every generated assignment passes (subclassed as Test<Name>, with NAME)."""

    NAME = ""
    DO_NOTHING = ("blank", "returns_none", "returns_first_argument")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        subject = generated(self.NAME)
        for argument, values in (("mutant", subject.mutants), ("alternative", subject.alts),
                                 ("nothing", self.DO_NOTHING)):
            if argument in metafunc.fixturenames:
                metafunc.parametrize(argument, values)

    @pytest.fixture(scope="class")
    @classmethod
    def subject(cls) -> Generated:
        return generated(cls.NAME)

    @pytest.fixture(scope="class")
    @classmethod
    def mutants_dir(cls, subject: Generated, tmp_path_factory: pytest.TempPathFactory
                    ) -> Path:
        return subject.write_mutants(tmp_path_factory.mktemp(f"{cls.NAME}_mutants"))

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, subject: Generated, tmp_path_factory: pytest.TempPathFactory,
               mutants_dir: Path) -> dict:
        return subject.grade(tmp_path_factory.mktemp(f"{cls.NAME}_grading"), mutants_dir)

    def test_reference_scores_full_marks(self, graded: dict) -> None:
        check_reference(graded["reference"])

    def test_doing_nothing_scores_zero(self, graded: dict, nothing: str) -> None:
        check_doing_nothing(graded[nothing], nothing)

    def test_partial_scores_in_between(self, graded: dict, subject: Generated) -> None:
        check_partial(graded["partial"], subject.partial)

    def test_committed_partial_example_is_what_the_generator_writes(
            self, subject: Generated) -> None:
        subject.check_committed()

    def test_generator_writes_the_graded_mutants_for_reviewers(
            self, subject: Generated, tmp_path: Path, mutants_dir: Path) -> None:
        subject.check_writes(tmp_path / "review", mutants_dir)

    def test_mutant_fails_only_its_function(self, graded: dict, mutants_dir: Path,
                                            mutant: str) -> None:
        check_mutant(graded[mutant], mutants_dir / f"{mutant}.py")

    def test_alternative_solution_scores_full_coding_marks(
            self, graded: dict, subject: Generated, mutants_dir: Path,
            alternative: str) -> None:
        check_alternative(graded[alternative], mutants_dir / f"{alternative}.py",
                          subject.assignment.config.coding.points)
