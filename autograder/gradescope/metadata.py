"""Gradescope's `/autograder/submission_metadata.json`: the dates that apply to one submission.

Read as Gradescope documents it (https://gradescope-autograders.readthedocs.io/en/latest/
submission_metadata/): `created_at`, the submission time, from which the late policy counts (in
a regrade too: it is the submission's, not the grading's); `assignment.due_date` and
`assignment.late_due_date`; and each user's own `assignment` dates (`users[].assignment`:
`due_date`, `late_due_date`), which differ from the assignment's for a student given an
extension on Gradescope.

The due date of the late policy is grading.yml's `due`, as in `autograder batch`, so that both
grade a submission alike; a user's own due date later than the assignment's is an extension (for
a group, the latest). Gradescope's own dates also hold back `after_due_date` results: none is
shown before the latest of them (`SubmissionDates.platform_closes`). A file that cannot be read
grades without them and says why, for staff.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from autograder.grading.late import SubmissionDates
from autograder.project.late_policy import parse_timestamp

MAX_METADATA_BYTES = 16 << 20  # previous submissions' results are in it


def submission_dates(path: Path, config_due: str | None) -> tuple[SubmissionDates, list[str]]:
    """The dates of the submission `path` describes, and notes for staff (what could not be
    read, a due date that is not grading.yml's `config_due`)."""
    notes: list[str] = []
    try:
        if path.stat().st_size > MAX_METADATA_BYTES:
            raise ValueError(f"over {MAX_METADATA_BYTES >> 20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return SubmissionDates(), [f"{path.name} could not be read ({exc}): graded without its "
                                   "dates (no late penalty; after_due_date results as "
                                   "grading.yml's due date says)"]
    created = _time(data.get("created_at"), "created_at", notes)
    assignment = data.get("assignment") if isinstance(data.get("assignment"), dict) else {}
    due = _time(assignment.get("due_date"), "assignment.due_date", notes)
    late_due = _time(assignment.get("late_due_date"), "assignment.late_due_date", notes)
    own_dues, own_dates = [], []
    users = data.get("users") if isinstance(data.get("users"), list) else []
    for i, user in enumerate(users):
        own = user.get("assignment") if isinstance(user, dict) else None
        if not isinstance(own, dict):
            continue
        own_due = _time(own.get("due_date"), f"users[{i}].assignment.due_date", notes)
        own_late = _time(own.get("late_due_date"), f"users[{i}].assignment.late_due_date", notes)
        own_dues += [own_due] if own_due is not None else []
        own_dates += [d for d in (own_due, own_late) if d is not None]
    extensions = [d for d in own_dues if due is None or d > due]
    closes = [d for d in (due, late_due, *own_dates) if d is not None]
    if due is not None and config_due and due != parse_timestamp(config_due):
        notes.append(f"Gradescope's due date ({due.isoformat()}) is not grading.yml's "
                     f"({config_due}): the late policy counts from grading.yml's, as a batch "
                     f"does; set both to the same date")
    return SubmissionDates(created_at=created, extended_due=max(extensions, default=None),
                           platform_closes=max(closes, default=None)), notes


def _time(value: Any, where: str, notes: list[str]) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        notes.append(f"submission_metadata.json {where}: {exc}; left out")
        return None
