"""grading.yml: loaded, validated against schemas/grading.schema.json, as dataclasses.

The schema is the one source of every default: the dataclasses here have none of their own
(a test holds them to that), and `default_limits()` reads the schema's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from autograder.project.late_policy import LatePolicy, parse_timestamp
from autograder.project.paths import Project
from autograder.project.schemas import SchemaError, validate, with_defaults


class ConfigError(ValueError):
    """grading.yml is missing, malformed or does not match its schema."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to every sandbox process (grading.yml's `limits` and
    `timeouts.call`, in bytes and seconds)."""

    call_timeout: float
    memory_bytes: int
    cpu_seconds: int
    max_file_bytes: int
    max_open_files: int
    max_processes: int
    disk_bytes: int
    output_bytes: int


def sandbox_limits(limits: dict, timeouts: dict) -> SandboxLimits:
    """SandboxLimits from grading.yml's `limits` and `timeouts` objects (defaults filled in)."""
    return SandboxLimits(
        call_timeout=timeouts["call"], memory_bytes=limits["memory_mb"] << 20,
        cpu_seconds=limits["cpu_seconds"], max_file_bytes=limits["file_mb"] << 20,
        max_open_files=limits["open_files"], output_bytes=limits["output_kb"] << 10,
        disk_bytes=limits["disk_mb"] << 20, max_processes=limits["processes"])


def default_limits(schemas: Path, **overrides: float) -> SandboxLimits:
    """The limits of an assignment whose grading.yml sets none (the defaults of the schema in
    folder `schemas`), with `overrides` (SandboxLimits field names) applied: for tests and
    benchmarks."""
    defaults = with_defaults({"limits": {}, "timeouts": {}}, "grading.schema.json", schemas,
                             "#/$defs/assignment")
    limits = sandbox_limits(defaults["limits"], defaults["timeouts"])
    return SandboxLimits(**{**limits.__dict__, **overrides})


@dataclass(frozen=True)
class SimilarityPolicy:
    """grading.yml's `similarity` object: the class's code-similarity check (autograder batch)."""

    enabled: bool
    threshold: float  # the share of either submission's own code found in the other
    noise_threshold: int  # copydetect's k: the shortest match, in tokenised characters
    guarantee_threshold: int  # matches this long are always found (window = this - k + 1)
    min_overlap: int  # tokenised characters a listed pair shares at least


@dataclass(frozen=True)
class PartConfig:
    points: float
    visibility: str


@dataclass(frozen=True)
class AssignmentConfig:
    name: str
    title: str
    module: str
    due: str | None
    multiple_choice: PartConfig
    reveal_key: bool
    coding: PartConfig
    functions: dict[str, float]
    show_student_output: bool
    call_timeout: float
    test_timeout: float
    submission_timeout: float
    import_timeout: float  # timeouts.imports: all imports of the student's module, in seconds
    limits: SandboxLimits
    gpu_policy: str
    rank_retries: int
    crash_limit: int  # crashes after which a function is not run again
    budget_factor: float  # k of a test's calibrated budget (0: flat `test_timeout`)
    budget_floor: float  # the least a calibrated budget may be, in seconds
    late: LatePolicy  # grading.yml's `late` (batch grading)
    # Visibility of unanswered and malformed answers (`multiple_choice.visibility` is that of
    # right and wrong ones): see parts.multiple_choice.problems_visibility in the schema.
    answer_problems_visibility: str
    similarity: SimilarityPolicy  # grading.yml's `similarity` (batch grading)


def load_config(project: Project) -> dict[str, AssignmentConfig]:
    """Every assignment of the project's grading.yml, validated against the project's schema;
    errors name the path of the bad key."""
    path = project.config
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    try:
        validate(raw, "grading.schema.json", path.name, project.schemas)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None
    raw = with_defaults(raw, "grading.schema.json", project.schemas)
    return {name: _assignment(name, a) for name, a in raw["assignments"].items()}


def assignment_config(name: str, project: Project) -> AssignmentConfig:
    configs = load_config(project)
    if name not in configs:
        raise ConfigError(f"{project.config.name} has no assignment {name!r} (it has: "
                          f"{', '.join(sorted(configs))})")
    return configs[name]


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
    limits, timeouts, late, similar = a["limits"], a["timeouts"], a["late"], a["similarity"]
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
    return AssignmentConfig(
        name=name, title=a["title"], module=a["module"], due=a.get("due"),
        multiple_choice=PartConfig(mc["points"], mc["visibility"]), reveal_key=mc["reveal_key"],
        coding=PartConfig(coding["points"], coding["visibility"]),
        functions=dict(coding["functions"]), show_student_output=coding["show_student_output"],
        call_timeout=timeouts["call"], test_timeout=timeouts["test"],
        submission_timeout=timeouts["submission"], import_timeout=float(timeouts["imports"]),
        limits=sandbox_limits(limits, timeouts),
        gpu_policy=a["gpu_policy"], rank_retries=a["rank_retries"],
        crash_limit=a["crash_limit"],
        budget_factor=float(timeouts["budget_factor"]),
        budget_floor=float(timeouts["budget_floor"]),
        answer_problems_visibility=mc["problems_visibility"],
        late=LatePolicy(policy=late["policy"], percent_per_day=float(late["percent_per_day"]),
                        max_days=late.get("max_days"),
                        grace_minutes=float(late["grace_minutes"])),
        similarity=SimilarityPolicy(
            enabled=similar["enabled"], threshold=float(similar["threshold"]),
            noise_threshold=similar["noise_threshold"],
            guarantee_threshold=similar["guarantee_threshold"],
            min_overlap=similar["min_overlap"]),
    )
