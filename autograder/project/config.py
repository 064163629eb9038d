"""grading.yml: loaded, validated against schemas/grading.schema.json, as dataclasses.

The schema is the one source of every key, default and meaning: each field of the records here
names the key it reads (autograder.project.settings), and none has a default of its own (a test
holds them to that, and to the schema's keys).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from autograder.project.late_policy import LatePolicy, parse_timestamp
from autograder.project.paths import Project
from autograder.project.schemas import SchemaError, validate, with_defaults
from autograder.project.settings import WHOLE, read, setting
from autograder.project.yaml_errors import not_valid_yaml


class ConfigError(ValueError):
    """grading.yml is missing, malformed or does not match its schema."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to every sandbox process (grading.yml's `limits` and
    `timeouts.call`, in bytes and seconds)."""

    call_timeout: float = setting("timeouts.call")
    memory_bytes: int = setting("limits.memory_mb", unit=1 << 20)
    cpu_seconds: int = setting("limits.cpu_seconds")
    max_file_bytes: int = setting("limits.file_mb", unit=1 << 20)
    max_open_files: int = setting("limits.open_files")
    max_processes: int = setting("limits.processes")
    disk_bytes: int = setting("limits.disk_mb", unit=1 << 20)
    output_bytes: int = setting("limits.output_kb", unit=1 << 10)


def default_limits(schemas: Path, **overrides: float) -> SandboxLimits:
    """The limits of an assignment whose grading.yml sets none (the defaults of the schema in
    folder `schemas`), with `overrides` (SandboxLimits field names) applied: for tests and
    benchmarks."""
    defaults = with_defaults({"limits": {}, "timeouts": {}}, "grading.schema.json", schemas,
                             "#/$defs/assignment")
    return replace(read(SandboxLimits, defaults), **overrides)


@dataclass(frozen=True)
class SimilarityPolicy:
    """grading.yml's `similarity` object: the class's code-similarity check (autograder batch)."""

    enabled: bool = setting("enabled")
    # the share of either submission's own code found in the other
    threshold: float = setting("threshold")
    # copydetect's k: the shortest match, in tokenised characters
    noise_threshold: int = setting("noise_threshold")
    # matches this long are always found (window = this - k + 1)
    guarantee_threshold: int = setting("guarantee_threshold")
    min_overlap: int = setting("min_overlap")  # tokenised characters a listed pair shares at least


@dataclass(frozen=True)
class PartConfig:
    points: float = setting("points")
    visibility: str = setting("visibility")


@dataclass(frozen=True)
class AssignmentConfig:
    """One assignment of grading.yml; each field names its key below `assignments.NAME` (the
    schema documents them), but `name`, the assignment's own key."""

    name: str = setting("name")
    title: str = setting("title")
    module: str = setting("module")
    due: str | None = setting("due")
    multiple_choice: PartConfig = setting("parts.multiple_choice")
    reveal_key: bool = setting("parts.multiple_choice.reveal_key")
    coding: PartConfig = setting("parts.coding")
    functions: dict[str, float] = setting("parts.coding.functions")
    show_student_output: bool = setting("parts.coding.show_student_output")
    call_timeout: float = setting("timeouts.call")
    test_timeout: float = setting("timeouts.test")
    submission_timeout: float = setting("timeouts.submission")
    import_timeout: float = setting("timeouts.imports")
    limits: SandboxLimits = setting(WHOLE)
    gpu_policy: str = setting("gpu_policy")
    rank_retries: int = setting("rank_retries")
    crash_limit: int = setting("crash_limit")
    budget_factor: float = setting("timeouts.budget_factor")
    budget_floor: float = setting("timeouts.budget_floor")
    late: LatePolicy = setting("late")
    # Visibility of unanswered and malformed answers (`multiple_choice.visibility` is that of
    # right and wrong ones): see parts.multiple_choice.problems_visibility in the schema.
    answer_problems_visibility: str = setting("parts.multiple_choice.problems_visibility")
    similarity: SimilarityPolicy = setting("similarity")


# Keys of an assignment that no record keeps: the total is checked against the parts, and is not
# used after.
CHECKED_ONLY = frozenset({"total"})


def load_config(project: Project, only: str | None = None) -> dict[str, AssignmentConfig]:
    """Every assignment of the project's grading.yml (with `only`, that one alone), validated
    against the project's schema; errors name the path of the bad key. With `only`, a mistake
    in another assignment's settings does not stop this one."""
    path = project.config
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(not_valid_yaml(str(path), exc)) from None
    def concerns(key: tuple) -> bool:  # (a problem under another assignment does not)
        return only is None or key[:1] != ("assignments",) or key[1:2] in ((), (only,))

    try:
        validate(raw, "grading.schema.json", path.name, project.schemas, concerns)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None
    if only is not None and only not in raw["assignments"]:
        raise ConfigError(f"{project.config.name} has no assignment {only!r} (it has: "
                          f"{', '.join(sorted(raw['assignments']))})")
    raw = with_defaults(raw, "grading.schema.json", project.schemas)
    return {name: _assignment(name, a) for name, a in raw["assignments"].items()
            if only is None or name == only}


def assignment_config(name: str, project: Project) -> AssignmentConfig:
    """One assignment's settings (a mistake in another assignment's does not stop it)."""
    return load_config(project, only=name)[name]


def _assignment(name: str, a: dict) -> AssignmentConfig:
    mc, coding = a["parts"]["multiple_choice"], a["parts"]["coding"]
    total = sum(coding["functions"].values())
    if abs(total - coding["points"]) > 1e-9:
        raise ConfigError(f"grading.yml: assignments.{name}.parts.coding.functions add up to "
                          f"{total:g}, but parts.coding.points is {coding['points']:g}")
    parts = mc["points"] + coding["points"]
    if abs(parts - a["total"]) > 1e-9:
        raise ConfigError(f"grading.yml: assignments.{name}: the parts add up to {parts:g} points "
                          f"(multiple_choice {mc['points']:g} + coding {coding['points']:g}), but "
                          f"its total is {a['total']:g}")
    late, similar = a["late"], a["similarity"]
    if similar["guarantee_threshold"] < similar["noise_threshold"]:
        raise ConfigError(f"grading.yml: assignments.{name}.similarity.guarantee_threshold "
                          f"({similar['guarantee_threshold']}) is below its noise_threshold "
                          f"({similar['noise_threshold']}); it must be at least that")
    if a.get("due") is not None:
        try:
            parse_timestamp(a["due"])
        except ValueError as exc:
            raise ConfigError(f"grading.yml: assignments.{name}.due: {exc}") from None
    if late["policy"] != "none" and not a.get("due"):
        raise ConfigError(f"grading.yml: assignments.{name}.late.policy is {late['policy']!r}, "
                          f"but the assignment has no due date (set assignments.{name}.due)")
    return read(AssignmentConfig, {**a, "name": name})

