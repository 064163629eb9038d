"""Acceptance tests of ddp_internals, graded by the real engine end to end (tests/assignments/
generated.py): the reference with the key scores 100, the blank template 0, do-nothing
submissions 0 on coding, the demo's partial example in between, and each mutant (made from the
reference by scripts/make_ddp_internals_mutants.py) fails the tests its header names and only
tests of its own function, where the grader's own rank in each scenario (observers.py) saw the
mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
from generated import (
    check_alternative,
    check_doing_nothing,
    check_mutant,
    check_partial,
    check_reference,
    generated,
)

GENERATED = generated("ddp_internals")
ASSIGNMENT = GENERATED.assignment
MUTANTS, ALTS = GENERATED.mutants, GENERATED.alts  # their files: the mutants_dir fixture
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mutants_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return GENERATED.write_mutants(tmp_path_factory.mktemp("ddp_internals_mutants"))


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, mutants_dir: Path) -> dict:
    return GENERATED.grade(tmp_path_factory.mktemp("ddp_internals_grading"), mutants_dir)


def test_reference_scores_full_marks(graded) -> None:
    check_reference(graded["reference"])


@pytest.mark.parametrize("name", ["blank", "returns_none", "returns_first_argument"])
def test_doing_nothing_scores_zero(graded, name: str) -> None:
    check_doing_nothing(graded[name], name)


def test_partial_scores_in_between(graded) -> None:
    check_partial(graded["partial"], GENERATED.partial)


def test_committed_partial_example_is_what_the_generator_writes() -> None:
    GENERATED.check_committed()


def test_generator_writes_the_graded_mutants_for_reviewers(tmp_path: Path,
                                                           mutants_dir: Path) -> None:
    GENERATED.check_writes(tmp_path / "review", mutants_dir)


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_fails_only_its_function(graded, mutants_dir: Path, name: str) -> None:
    check_mutant(graded[name], mutants_dir / f"{name}.py")


@pytest.mark.parametrize("name", ALTS)
def test_alternative_solution_scores_full_coding_marks(graded, mutants_dir: Path,
                                                       name: str) -> None:
    check_alternative(graded[name], mutants_dir / f"{name}.py", 80)


