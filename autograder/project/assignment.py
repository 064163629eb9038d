"""An assignment's sources on disk, with its configuration and question bank, checked together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autograder.project.config import AssignmentConfig, ConfigError, assignment_config
from autograder.project.paths import Project
from autograder.project.question_bank import QuestionBank, load_bank


@dataclass(frozen=True)
class Assignment:
    name: str
    root: Path
    config: AssignmentConfig
    bank: QuestionBank
    project: Project  # whose schemas its reports are checked against

    @property
    def solution(self) -> Path:
        return self.root / "solution" / f"{self.config.module}.py"

    @property
    def probes(self) -> Path:
        return self.root / "probes.py"

    @property
    def hidden_tests(self) -> Path:
        return self.root / "tests" / "hidden"

    @property
    def public_tests(self) -> Path:
        return self.root / "tests" / "public"


def load_assignment(name: str, project: Project) -> Assignment:
    """Load and cross-check an assignment of `project`; a mismatch raises ConfigError with the
    numbers."""
    config = assignment_config(name, project)
    root = project.assignments / name
    if not root.is_dir():
        raise ConfigError(f"assignment folder {root} does not exist")
    bank = load_bank(root / "questions.yml", project.schemas)
    if abs(bank.total_points - config.multiple_choice.points) > 1e-9:
        raise ConfigError(
            f"the questions of {name} add up to {bank.total_points:g} points, but grading.yml "
            f"gives multiple_choice {config.multiple_choice.points:g}")
    assignment = Assignment(name, root, config, bank, project)
    for path in (assignment.hidden_tests, assignment.probes):
        if not path.exists():
            raise ConfigError(f"{name}: {path} is missing")
    return assignment


