"""One vocabulary of statuses (autograder.protocol.statuses), the same as the schemas' and used
as it says by the runner and the supervisor."""

from __future__ import annotations

import json

import pytest

from autograder.batch.submission_status import NEEDS_A_LOOK
from autograder.project.paths import PACKAGE_ROOT
from autograder.protocol.job import SCORED_VISIBILITIES, VISIBILITIES
from autograder.protocol.runner_events import EVENTS
from autograder.protocol.statuses import (
    NOT_RUN_CAUSES,
    REPORT_STATUSES,
    RUNNER_EVENTS,
    SUBMISSION_STATES,
    TEST_CAUSES,
    outcome_of,
)
from autograder.runner.pytest_plugin import FAILURE_CAUSES


def report_schema_item(name: str) -> dict:
    schema = json.loads((SCHEMAS / "report.schema.json").read_text())
    return schema["properties"]["tests"]["items"]["properties"][name]


SCHEMAS = PACKAGE_ROOT / "schemas"


def test_report_statuses_and_visibilities_are_the_report_schemas():
    assert tuple(report_schema_item("status")["enum"]) == REPORT_STATUSES
    assert tuple(report_schema_item("visibility")["enum"]) == VISIBILITIES


def test_visibilities_are_the_grading_schemas():
    definitions = json.loads((SCHEMAS / "grading.schema.json").read_text())["$defs"]
    assert tuple(definitions["visibility"]["enum"]) == VISIBILITIES
    assert tuple(definitions["scored_visibility"]["enum"]) == SCORED_VISIBILITIES


def test_every_submission_state_but_ok_needs_a_look():
    assert SUBMISSION_STATES[-1] == "ok" and NEEDS_A_LOOK == SUBMISSION_STATES[:-1]


def test_every_runner_event_kind_has_its_record():
    # The runner can only send records (see tests/protocol/test_runner_events.py), one per kind.
    assert tuple(EVENTS) == RUNNER_EVENTS
    assert all(cls.kind == kind for kind, cls in EVENTS.items())


def test_test_causes_are_the_report_schemas_and_imply_the_outcome():
    assert tuple(report_schema_item("cause")["enum"]) == TEST_CAUSES
    assert outcome_of("passed") == "passed" and outcome_of("not_implemented") == "failed"
    assert outcome_of("gpu_unavailable") == "gpu_unavailable"
    assert all(c.startswith("not_run_") for c in NOT_RUN_CAUSES) and len(NOT_RUN_CAUSES) == 4
    for question_only in ("answered", "not_answered", "bogus"):
        with pytest.raises(ValueError):
            outcome_of(question_only)  # type: ignore[arg-type]


def test_every_cause_the_plugin_gives_a_failure_is_in_the_vocabulary():
    # (checked when the plugin is imported too)
    assert {cause for _, cause in FAILURE_CAUSES} <= set(TEST_CAUSES)
    # Most specific first: a subclass never hides behind its base.
    kinds = [kind for kind, _ in FAILURE_CAUSES]
    for i, kind in enumerate(kinds):
        assert not any(issubclass(kind, earlier) for earlier in kinds[:i]), kind
