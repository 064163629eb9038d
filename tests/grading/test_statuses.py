"""One vocabulary of statuses (autograder.grading.statuses), the same as the schemas' and used
as it says by the runner and the supervisor."""

from __future__ import annotations

import json

from autograder.grading.job import VISIBILITIES
from autograder.grading.runner_events import EVENTS
from autograder.grading.statuses import REPORT_STATUSES, RUNNER_EVENTS, SUBMISSION_STATES
from autograder.grading.submission_status import NEEDS_A_LOOK
from autograder.project.paths import SCHEMAS_DIR


def report_schema_item(name: str) -> dict:
    schema = json.loads((SCHEMAS_DIR / "report.schema.json").read_text())
    return schema["properties"]["tests"]["items"]["properties"][name]


def test_report_statuses_and_visibilities_are_the_report_schemas():
    assert tuple(report_schema_item("status")["enum"]) == REPORT_STATUSES
    assert tuple(report_schema_item("visibility")["enum"]) == VISIBILITIES


def test_every_submission_state_but_ok_needs_a_look():
    assert SUBMISSION_STATES[-1] == "ok" and NEEDS_A_LOOK == SUBMISSION_STATES[:-1]


def test_every_runner_event_kind_has_its_record():
    # The runner can only send records (see tests/grading/test_runner_events.py), one per kind.
    assert tuple(EVENTS) == RUNNER_EVENTS
    assert all(cls.kind == kind for kind, cls in EVENTS.items())
