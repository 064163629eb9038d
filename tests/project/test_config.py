"""grading.yml validation: errors name the path of the bad key."""

import dataclasses
import json

import pytest
from repo_project import REPO

from autograder.project.config import (
    CHECKED_ONLY,
    AssignmentConfig,
    ConfigError,
    PartConfig,
    SandboxLimits,
    SimilarityPolicy,
    assignment_config,
    default_limits,
    load_config,
)
from autograder.project.late_policy import LatePolicy
from autograder.project.paths import Project
from autograder.project.settings import keys_read, read, setting
from autograder.protocol.job import Job


def write(tmp_path, text):
    path = tmp_path / "grading.yml"
    path.write_text(text)
    return path


VALID = """
assignments:
  hw:
    title: Homework
    module: hw
    total: 15
    parts:
      multiple_choice: {points: 10}
      coding: {points: 5, functions: {f: 2, g: 3}}
"""


def test_project_config_is_valid_and_splits_coding_points():
    config = load_config(REPO)["dp_basics"]
    assert config.multiple_choice.points == 30 and config.coding.points == 70
    assert sum(config.functions.values()) == 70 and len(config.functions) == 12


def test_defaults_come_from_the_schema(tmp_path):
    config = load_config(Project.of_config(write(tmp_path, VALID)))["hw"]
    assert config.gpu_policy == "reweight" and config.call_timeout == 10
    assert config.limits.output_bytes == 1024 * 1024 and config.reveal_key is False
    similarity = json.loads((REPO.schemas / "grading.schema.json").read_text())["$defs"][
        "assignment"]["properties"]["similarity"]["properties"]
    assert config.similarity == SimilarityPolicy(
        **{name: spec["default"] for name, spec in similarity.items()})


# Job fields that the supervisor copies from grading.yml (the rest are the runner's own state).
JOB_FROM_CONFIG = {"test_timeout", "rank_retries", "crash_limit", "import_timeout", "visibility",
                   "budget_factor", "budget_floor", "limits"}


@pytest.mark.parametrize("record", [SandboxLimits, AssignmentConfig, PartConfig, LatePolicy,
                                    SimilarityPolicy, Job])
def test_records_of_grading_yml_have_no_defaults_of_their_own(record):
    # The schema is the one source of every default: a default here would drift from it (as
    # cpu_seconds once did: 120 here, 300 in the schema).
    with_default = {f.name for f in dataclasses.fields(record)
                    if f.default is not dataclasses.MISSING
                    or f.default_factory is not dataclasses.MISSING}
    if record is Job:
        with_default &= JOB_FROM_CONFIG
    assert not with_default


def _leaves(spec: dict, defs: dict, prefix: str = "") -> set[str]:
    spec = defs[spec["$ref"].rsplit("/", 1)[1]] if "$ref" in spec else spec
    if "properties" not in spec:
        return {prefix}
    return set().union(*(_leaves(value, defs, ".".join(p for p in (prefix, key) if p))
                         for key, value in spec["properties"].items()))


def test_the_records_read_every_key_of_an_assignment_and_no_other():
    # Each field names its key; a key added to the schema and read by nobody, or a field naming
    # a key the schema lacks (a typo, read as None), fails here.
    schema = json.loads((REPO.schemas / "grading.schema.json").read_text())
    keys = _leaves(schema["$defs"]["assignment"], schema["$defs"])
    assert "timeouts.budget_floor" in keys and "late.max_days" in keys
    assert keys_read(AssignmentConfig) - {"name"} == keys - CHECKED_ONLY


def test_a_field_is_read_from_its_key_in_its_unit():
    @dataclasses.dataclass(frozen=True)
    class Inner:
        size: int = setting("limits.size_mb", unit=1 << 20)
        seconds: float = setting("timeouts.call")

    @dataclasses.dataclass(frozen=True)
    class Outer:
        inner: Inner = setting("")
        late: float | None = setting("late.days")
        names: dict = setting("names")

    values = {"limits": {"size_mb": 2}, "timeouts": {"call": 3}, "late": {}, "names": {"a": 1}}
    outer = read(Outer, values)
    assert outer == Outer(Inner(2 << 20, 3.0), None, {"a": 1})
    assert isinstance(outer.inner.seconds, float) and outer.names is not values["names"]
    assert keys_read(Outer) == {"limits.size_mb", "timeouts.call", "late.days", "names"}


def test_default_limits_are_the_schemas(tmp_path):
    assignment = json.loads((REPO.schemas / "grading.schema.json").read_text())["$defs"][
        "assignment"]["properties"]
    limit = {k: v["default"] for k, v in assignment["limits"]["properties"].items()}
    call = assignment["timeouts"]["properties"]["call"]["default"]
    assert default_limits(REPO.schemas) == SandboxLimits(
        call_timeout=call, memory_bytes=limit["memory_mb"] << 20,
        cpu_seconds=limit["cpu_seconds"], max_file_bytes=limit["file_mb"] << 20,
        max_open_files=limit["open_files"], max_processes=limit["processes"],
        disk_bytes=limit["disk_mb"] << 20, output_bytes=limit["output_kb"] << 10)
    # and what an assignment without `limits` gets when loaded
    configured = load_config(Project.of_config(write(tmp_path, VALID)))["hw"]
    assert default_limits(REPO.schemas) == configured.limits
    assert default_limits(REPO.schemas, call_timeout=3).call_timeout == 3


@pytest.mark.parametrize("change, message", [
    (("points: 10", "points: -1"), "assignments.hw.parts.multiple_choice.points: -1 is less"),
    (("module: hw", "module: 3hw"), "assignments.hw.module: '3hw' does not match"),
    (("title: Homework", "title: Homework\n    gpu_policy: maybe"),
     "assignments.hw.gpu_policy: 'maybe' is not one of"),
    (("title: Homework", "title: Homework\n    timeouts: {cal: 3}"),
     "assignments.hw.timeouts: Additional properties are not allowed ('cal' was unexpected)"),
    (("f: 2", "f: 1"), "coding.functions add up to 4, but parts.coding.points is 5"),
    (("title: Homework", "title: Homework\n    similarity: {threshold: 1.5}"),
     "assignments.hw.similarity.threshold: 1.5 is greater than the maximum of 1"),
    (("title: Homework", "title: Homework\n    similarity: {noise_threshold: 30, "
      "guarantee_threshold: 20}"),
     "similarity.guarantee_threshold (20) is below its noise_threshold (30)"),
])
def test_errors_name_the_bad_key(tmp_path, change, message):
    with pytest.raises(ConfigError) as info:
        load_config(Project.of_config(write(tmp_path, VALID.replace(*change))))
    assert message in str(info.value)


def test_malformed_yaml_is_one_problem_naming_the_file_and_the_line(tmp_path):
    path = write(tmp_path, "assignments: [\n")
    with pytest.raises(ConfigError) as info:
        load_config(Project.of_config(path))
    message = str(info.value)
    assert message.startswith(f"{path} is not valid YAML at line 2, column 1: ")
    assert "\n" not in message and "<unicode string>" not in message


def test_an_unquoted_date_is_told_to_be_quoted(tmp_path):
    """YAML reads `due: 2026-12-01T17:00:00-05:00` as a date, not text: the error says to
    quote it, not `datetime.datetime(...) is not of type 'string'`."""
    unquoted = VALID.replace("    module: hw\n",
                             "    module: hw\n    due: 2026-12-01T17:00:00-05:00\n")
    with pytest.raises(ConfigError) as info:
        load_config(Project.of_config(write(tmp_path, unquoted)))
    assert "must be written in quotes" in str(info.value)
    assert "datetime" not in str(info.value)


def test_a_mistake_in_one_assignment_stops_only_that_one(tmp_path):
    """Grading hw needs hw's settings right, not every assignment's: a typo in another's
    does not stop it; validating the whole file still finds it."""
    other = VALID + "  other:\n    title: Other\n    module: other\n    total: 1\n" \
        "    parts:\n      multiple_choice: {points: 1}\n      coding: {points: zero}\n"
    project = Project.of_config(write(tmp_path, other))
    assert assignment_config("hw", project).title == "Homework"
    with pytest.raises(ConfigError, match="assignments.other.parts.coding"):
        assignment_config("other", project)
    with pytest.raises(ConfigError, match="assignments.other.parts.coding"):
        load_config(project)
    with pytest.raises(ConfigError, match="has no assignment 'nope' \\(it has: hw, other\\)"):
        assignment_config("nope", project)
