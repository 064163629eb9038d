"""grading.yml validation: errors name the path of the bad key."""

import pytest

from autograder.project.config import ConfigError, load_config
from autograder.project.paths import GRADING_CONFIG


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
    config = load_config(GRADING_CONFIG)["dp_basics"]
    assert config.multiple_choice.points == 30 and config.coding.points == 70
    assert sum(config.functions.values()) == 70 and len(config.functions) == 12


def test_defaults_come_from_the_schema(tmp_path):
    config = load_config(write(tmp_path, VALID))["hw"]
    assert config.gpu_policy == "reweight" and config.call_timeout == 10
    assert config.limits.output_bytes == 1024 * 1024 and config.reveal_key is False


@pytest.mark.parametrize("change, message", [
    (("points: 10", "points: -1"), "assignments.hw.parts.multiple_choice.points: -1 is less"),
    (("module: hw", "module: 3hw"), "assignments.hw.module: '3hw' does not match"),
    (("title: Homework", "title: Homework\n    gpu_policy: maybe"),
     "assignments.hw.gpu_policy: 'maybe' is not one of"),
    (("title: Homework", "title: Homework\n    timeouts: {cal: 3}"),
     "assignments.hw.timeouts: Additional properties are not allowed ('cal' was unexpected)"),
    (("f: 2", "f: 1"), "coding.functions add up to 4, but parts.coding.points is 5"),
])
def test_errors_name_the_bad_key(tmp_path, change, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, VALID.replace(*change)))
    assert message in str(info.value)


def test_malformed_yaml_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "assignments: [\n"))
