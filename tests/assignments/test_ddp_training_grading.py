"""Acceptance tests of ddp_training, graded by the real engine end to end (as
test_dp_basics_grading.py does for dp_basics): the reference with the key scores 100, the blank
template 0, do-nothing submissions 0 on coding, the demo's partial example in between, and each
mutant (scripts/make_ddp_training_mutants.py) fails the tests its header names and only tests
of its own function."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from autograder.grading.grade import grade_loaded
from autograder.project.assignment import load_assignment
from autograder.project.markers import reference, strip_solutions
from autograder.release.build import key_answers

ASSIGNMENT = load_assignment("ddp_training")
MUTANTS_DIR = Path(__file__).parent / "mutants" / "ddp_training"
MUTANTS = sorted(MUTANTS_DIR.glob("*.py"))
PARTIAL_DIR = ASSIGNMENT.root / "examples" / "partial"
pytestmark = pytest.mark.slow


def header(path: Path, tag: str) -> list[str]:
    return [line[len(f"# {tag}: "):].strip() for line in path.read_text().splitlines()
            if line.startswith(f"# {tag}: ")]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
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
        **{p.stem: p.read_text() for p in MUTANTS},
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

    def grade_one(name: str):
        try:
            return grade_loaded(folders[name], ASSIGNMENT, base / "out" / name)
        except Exception as exc:  # one broken grading must not hide the others
            return exc

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(folders, pool.map(grade_one, folders), strict=True))


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


def test_partial_scores_in_between(graded) -> None:
    report = graded["partial"]
    assert 0 < report.score < 100
    broken = {line.split(":", 1)[0] for line in header(PARTIAL_DIR / "ddp_training.py",
                                                      "PARTIAL")}
    assert {t.name.split(":", 1)[0] for t in failed(report)} == broken


@pytest.mark.parametrize("path", MUTANTS, ids=[p.stem for p in MUTANTS])
def test_mutant_fails_only_its_function(graded, path: Path) -> None:
    report = graded[path.stem]
    (line,) = header(path, "MUTANT")
    function = line.split(":", 1)[0]
    names = [t.name for t in failed(report)]
    for expected in header(path, "EXPECT_FAIL"):
        assert any(expected in n for n in names), (expected, names)
    assert all(n.startswith(f"{function}: ") for n in names), names
