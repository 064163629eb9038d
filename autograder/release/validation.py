"""`autograder validate`: every problem of an assignment's sources at once, by file.

Above the grading layer because it collects the hidden tests with a real runner.
"""

from __future__ import annotations

from pathlib import Path

from autograder.project.assignment import Assignment
from autograder.project.config import ConfigError, assignment_config
from autograder.project.paths import GRADING_CONFIG
from autograder.project.question_bank import QuestionBankError, load_bank


def check_assignment(name: str, config_path: Path = GRADING_CONFIG,
                     workdir: Path | None = None) -> dict[str, list[str]]:
    """Every problem of an assignment's sources at once, by file (empty when all is well).

    Unlike `load_assignment`, which stops at the first broken file, this goes on: the
    configuration, the question bank, the points between them, probes and the hidden tests
    (collected by a real runner when the configuration can be read), so one run of
    `autograder validate` lists what today would take several rounds to find.
    """
    import tempfile

    from autograder.grading.supervisor import GradingError, collect_hidden_tests

    problems: dict[str, list[str]] = {}

    def add(label: str, found: list[str]) -> None:
        if found:
            problems.setdefault(label, []).extend(found)

    config = bank = None
    try:
        config = assignment_config(name, config_path)
    except ConfigError as exc:
        add(config_path.name, str(exc).splitlines())
    root = config_path.resolve().parent / "assignments" / name
    if not root.is_dir():
        add(f"assignments/{name}", [f"the assignment folder {root} does not exist"])
        return problems
    try:
        bank = load_bank(root / "questions.yml")
        bank_points: float | None = bank.total_points
    except QuestionBankError as exc:
        add(f"assignments/{name}/questions.yml", exc.errors)
        bank_points = _raw_points(root / "questions.yml")  # the total can be checked anyway
    if config is not None and bank_points is not None and \
            abs(bank_points - config.multiple_choice.points) > 1e-9:
        add(f"assignments/{name}/questions.yml",
            [f"the questions add up to {bank_points:g} points, but grading.yml gives "
             f"multiple_choice {config.multiple_choice.points:g}"])
    for path in (root / "tests" / "hidden", root / "probes.py"):
        if not path.exists():
            add(f"assignments/{name}", [f"{path.relative_to(root)} is missing"])
    if config is None or not (root / "tests" / "hidden").is_dir():
        return problems
    spec = Assignment(name, root, config, bank)  # type: ignore[arg-type] - tests need no bank
    try:
        with tempfile.TemporaryDirectory(dir=workdir) as folder:
            collect_hidden_tests(spec, Path(folder))
    except GradingError as exc:
        lines = [line.strip().removeprefix("- ") for line in str(exc).splitlines()]
        add(f"assignments/{name}/tests/hidden",
            [line for line in lines if line and line != "invalid hidden tests:"])
    return problems


def _raw_points(path: Path) -> float | None:
    """The questions' points as written, from a bank that does not load (None if unreadable)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return float(sum(q["points"] for q in data["questions"]
                         if isinstance(q, dict) and type(q.get("points")) in (int, float)))
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return None
