"""Acceptance tests of ddp_training, graded by the real engine end to end (as
test_dp_basics_grading.py does for dp_basics): the reference with the key scores 100, the blank
template 0, do-nothing submissions 0 on coding, the demo's partial example in between, and each
mutant (made from the reference by scripts/make_ddp_training_mutants.py into a temporary
folder when the tests start) fails the tests its header names and only tests of its own
function."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from acceptance import grade_all
from repo_project import REPO

from autograder.project.assignment import load_assignment
from autograder.project.markers import reference, strip_solutions
from autograder.release.build import key_answers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make_ddp_training_mutants.py"
ASSIGNMENT = load_assignment("ddp_training", REPO)
_spec = importlib.util.spec_from_file_location("make_ddp_training_mutants", SCRIPT)
GENERATOR = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(GENERATOR)
MUTANTS = sorted(spec[0] for spec in GENERATOR.MUTANTS)  # their files: the mutants_dir fixture
ALTS = sorted(spec[0] for spec in GENERATOR.ALTS)  # correct solutions written differently
PARTIAL_DIR = ASSIGNMENT.root / "examples" / "partial"
pytestmark = pytest.mark.slow


def header(path: Path, tag: str) -> list[str]:
    return [line[len(f"# {tag}: "):].strip() for line in path.read_text().splitlines()
            if line.startswith(f"# {tag}: ")]


@pytest.fixture(scope="module")
def mutants_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ddp_training_mutants")
    written = GENERATOR.write_mutants(folder, ASSIGNMENT.solution.read_text())
    assert sorted(p.stem for p in written) == sorted([*MUTANTS, *ALTS])
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, mutants_dir: Path) -> dict:
    base = tmp_path_factory.mktemp("ddp_training_grading")
    source = ASSIGNMENT.solution.read_text()
    blank = strip_solutions(source)
    names = re.findall(r"^def (\w+)\(", blank, flags=re.M)
    modules = {
        "reference": reference(source), "blank": blank,
        "returns_none": "".join(f"def {n}(*args, **kwargs):\n    return None\n\n"
                                for n in names),
        "returns_first_argument": "".join(
            f"def {n}(*args, **kwargs):\n    return args[0] if args else None\n\n"
            for n in names),
        "partial": (PARTIAL_DIR / "ddp_training.py").read_text(),
        **{p.stem: p.read_text() for p in sorted(mutants_dir.glob("*.py"))},
    }
    folders = {}
    for name, text in modules.items():
        folder = base / "submissions" / name
        folder.mkdir(parents=True)
        (folder / "ddp_training.py").write_text(text)
        folders[name] = folder
    (folders["reference"] / "answers.yml").write_text(
        yaml.safe_dump(key_answers(ASSIGNMENT.bank)))
    (folders["partial"] / "answers.yml").write_text((PARTIAL_DIR / "answers.yml").read_text())

    return grade_all({name: (folder, ASSIGNMENT) for name, folder in folders.items()},
                     base / "out")


def part(report, name: str) -> float:
    return next(p.score for p in report.parts if p.name == name)


def failed(report) -> list:
    return [t for t in report.tests if t.part == "coding" and t.status == "failed"]


def test_reference_scores_full_marks(graded) -> None:
    report = graded["reference"]
    assert not failed(report), [(t.name, t.message) for t in failed(report)]
    assert report.score == report.max_score == 100


@pytest.mark.parametrize("name", ["blank", "returns_none", "returns_first_argument"])
def test_doing_nothing_scores_zero(graded, name: str) -> None:
    report = graded[name]
    assert part(report, "coding") == 0, [t.name for t in report.tests
                                          if t.part == "coding" and t.score > 0]
    if name == "blank":
        assert report.score == 0
        ran = [t for t in report.tests if t.part == "coding" and t.status != "excluded"]
        assert {t.cause for t in ran} == {"not_implemented"}, [(t.name, t.cause) for t in ran]


def test_partial_scores_in_between(graded) -> None:
    report = graded["partial"]
    assert 0 < report.score < 100
    broken = {line.split(":", 1)[0] for line in header(PARTIAL_DIR / "ddp_training.py",
                                                      "PARTIAL")}
    assert {t.name.split(":", 1)[0] for t in failed(report)} == broken


def test_committed_partial_example_is_what_the_generator_writes() -> None:
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                           text=True, cwd=ROOT)
    assert check.returncode == 0, check.stdout + check.stderr


def test_generator_writes_the_graded_mutants_for_reviewers(tmp_path: Path,
                                                           mutants_dir: Path) -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--write", str(tmp_path / "review")],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    written = {p.name: p.read_text() for p in (tmp_path / "review").iterdir()}
    assert written == {p.name: p.read_text() for p in mutants_dir.iterdir()}
    assert len(written) == len(MUTANTS) + len(ALTS)


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_fails_only_its_function(graded, mutants_dir: Path, name: str) -> None:
    path = mutants_dir / f"{name}.py"
    report = graded[path.stem]
    (line,) = header(path, "MUTANT")
    function = line.split(":", 1)[0]
    names = [t.name for t in failed(report)]
    for expected in header(path, "EXPECT_FAIL"):
        assert any(expected in n for n in names), (expected, names)
    assert all(n.startswith(f"{function}: ") for n in names), names


@pytest.mark.parametrize("name", ALTS)
def test_alternative_solution_scores_full_coding_marks(graded, mutants_dir: Path,
                                                       name: str) -> None:
    assert header(mutants_dir / f"{name}.py", "ALT"), f"{name} has no '# ALT:' line"
    report = graded[name]
    assert not failed(report), [(t.name, t.message) for t in failed(report)]
    assert part(report, "coding") == 70


# Issue 24: correct readings of a docstring that the tests once failed, all in alt_faithful
# (one grading); each of these functions gets every point of every test, among them the ones
# that used to fail, named here.
FAITHFUL = {
    "evaluate_accuracy": ("the counts divided in float32 (0.4000000059604645 for 0.4)",
                          ["evaluate_accuracy: accuracy over the whole dataset"]),
    "load_checkpoint": ("torch.load(path, device) on the CPU, map_location={'cuda:0': "
                        "f'cuda:{rank}'} on GPUs, both through `from torch import load`",
                        ["load_checkpoint: every rank loads onto its own GPU",
                         "load_checkpoint: on CPU ranks"]),
    "save_checkpoint": ("`from torch import save`",
                        ["save_checkpoint: rank 0 writes model, optimizer and epoch once"]),
}


@pytest.mark.parametrize("function", sorted(FAITHFUL))
def test_a_faithful_reading_of_the_docstring_gets_full_points(graded, function: str) -> None:
    reading, once_failed = FAITHFUL[function]
    tests = [t for t in graded["alt_faithful"].tests
             if t.part == "coding" and t.name.startswith(f"{function}: ")]
    for name in once_failed:
        assert any(t.name.startswith(name) for t in tests), f"no test {name!r}"
    lost = [(t.name, t.message) for t in tests if t.score < t.max_score]
    assert not lost, f"{function} ({reading}): {lost}"


def test_the_public_tests_accept_the_launch_variables_checked_in_any_order(
        tmp_path: Path, mutants_dir: Path) -> None:
    """The public check of a missing variable matched "RANK" with every variable unset, so an
    init_from_env that checks WORLD_SIZE first failed it (issue 24)."""
    shutil.copytree(ASSIGNMENT.public_tests, tmp_path / "tests")
    shutil.copy(mutants_dir / "alt_faithful.py", tmp_path / "ddp_training.py")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests", "-k", "init_from_env"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6 passed" in run.stdout, run.stdout
