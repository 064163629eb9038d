"""The repository's own project (its grading.yml, assignments and schemas), as tests use it."""

from pathlib import Path

from autograder.project.paths import Project

REPO = Project.at(Path(__file__).resolve().parents[1], "the repository")
