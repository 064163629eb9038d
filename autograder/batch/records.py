"""Records of a class batch, shared by discovery, late policy, backends, gradebook and overview.

Data flows one way: ClassSubmission (found on disk) -> GradeTask (sent to a worker) ->
GradeOutcome (the worker's `Report`, sent back as plain JSON: to_json / from_json) -> gradebook
row -> GradedSubmission (read back, its `Report` typed again, for grades.csv and the overview).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from autograder.batch.submission_status import SubmissionStatus, derive
from autograder.grading.late import LateStatus, SubmissionDates
from autograder.grading.results import Report


def report_folder(sid: str) -> str:
    """The folder name under OUT/reports/ for a student (Gradescope sids are free text): the
    sid itself when it is a safe name, else its safe characters and a hash of it, so that two
    sids never share a folder ('ann lee' and 'ann_lee' did)."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in sid).strip(".")
    if cleaned == sid and sid:
        return sid
    return f"{cleaned or 'unknown'}-{hashlib.sha256(sid.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class Submitter:
    name: str
    sid: str
    email: str = ""


@dataclass
class ClassSubmission:
    """One submission of a class: a Gradescope `submission_<id>` folder or a student folder."""

    key: str  # unique in the batch: "submission_123456", or the student folder's name
    path: Path  # the folder (or .zip) holding the student's files
    submitters: list[Submitter]  # several for a group submission
    created_at: datetime | None = None  # timezone-aware when known

    @property
    def sid(self) -> str:
        """The folder name of this submission's reports: the first submitter's sid."""
        return self.submitters[0].sid if self.submitters else self.key


@dataclass(frozen=True)
class GradeTask:
    """What a worker needs to grade one submission; plain data (it may cross to a cluster)."""

    key: str
    submission: str  # path, as text
    out: str  # the folder the worker writes results.json and the reports to
    assignment: str
    config_path: str
    # The submission's dates: grading derives its late entry from them (late_entry), as
    # every path that grades does.
    dates: SubmissionDates | None = None

    def to_json(self) -> dict:
        return {**asdict(self), "dates": self.dates.to_json() if self.dates else None}

    @classmethod
    def from_json(cls, data: dict) -> GradeTask:
        dates = data.get("dates")
        return cls(**{**data, "dates": SubmissionDates.from_json(dates) if dates else None})


@dataclass
class GradeOutcome:
    """A worker's answer: the report, or why grading itself failed. It crosses from the worker
    as `to_json()` (plain JSON, never a pickle) and is read back with `from_json`."""

    key: str
    report: Report | None
    error: str | None  # the grader's own failure (the student's faults are in the report)
    seconds: float
    worker: str = ""  # host/process that graded it, for the TA's log

    def to_json(self) -> dict:
        return {"key": self.key, "report": self.report.to_json() if self.report else None,
                "error": self.error, "seconds": self.seconds, "worker": self.worker}

    @classmethod
    def from_json(cls, data: dict) -> GradeOutcome:
        """The outcome `to_json` wrote; raises (TypeError, KeyError, ValueError,
        AttributeError) on anything else."""
        report = data["report"]
        return cls(str(data["key"]), Report.from_json(report) if report is not None else None,
                   None if data["error"] is None else str(data["error"]),
                   float(data["seconds"]), str(data.get("worker", "")))


ADJUSTMENTS = ("override", "extension")


@dataclass(frozen=True)
class Adjustment:
    """A TA's decision about one student, kept in the gradebook beside the runs (never
    changed: a later one of the same kind replaces it, and clearing is one more)."""

    id: int
    sid: str
    kind: str  # "override": the score exported; "extension": the student's own due date
    score: float | None  # the override's score; None for an extension or a cleared override
    until: str | None  # the extension's due date (ISO 8601); None for an override or cleared
    reason: str  # why (a regrade request, a medical note): required
    by: str  # who decided
    at: str  # when it was recorded, ISO 8601 UTC

    @property
    def cleared(self) -> bool:
        return (self.score if self.kind == "override" else self.until) is None

    def describe(self) -> str:
        """One line for people: 'override to 90: regrade request #12 (by ta1, 2026-...)'."""
        if self.cleared:
            what = f"{self.kind} cleared"
        elif self.kind == "override":
            what = f"score overridden to {self.score:g}"
        else:
            what = f"due date extended to {self.until}"
        return f"{what}: {self.reason} (by {self.by}, {self.at})"


@dataclass(frozen=True)
class StoredRun:
    """One grading run of a submission as the gradebook holds it, without its report."""

    id: int
    graded_at: str  # ISO 8601, UTC
    score: float | None  # after the late penalty; None when the grader failed
    raw_score: float | None
    max_score: float | None
    error: str | None
    content_hash: str
    grader_version: str
    assignment_version: str
    late: str | None  # the LateStatus as the gradebook stores it (JSON), to compare runs
    results_shown_at: str | None  # from the report's release
    status: SubmissionStatus
    tests: dict[str, tuple[str, float]]  # name -> (status, score), from the run's outcomes


@dataclass
class GradedSubmission:
    """The latest grading run of one submission, as the gradebook holds it."""

    submission: ClassSubmission
    run_id: int
    report: Report | None
    score: float  # after the late penalty
    raw_score: float
    max_score: float
    late: LateStatus | None
    error: str | None
    graded_at: str  # ISO 8601, UTC
    seconds: float
    history: int = 1  # how many runs the gradebook holds for this submission
    extra: dict = field(default_factory=dict)
    status: SubmissionStatus | None = None  # derived from the report if None
    overrides: dict[str, Adjustment] = field(default_factory=dict)  # by sid, those in force

    def __post_init__(self) -> None:
        if self.status is None:
            self.status = derive(self.report, self.error)

    @property
    def graded(self) -> bool:
        """The grader did not fail on it: it has a report and a score."""
        return self.report is not None and self.error is None

    @property
    def score_in_force(self) -> float:
        """The score the class's numbers count for this submission: the one every export gives
        its students when they all have the same (an override of each of them), else the
        graded score after the late penalty (a group whose members differ shows each one's)."""
        finals = {self.final_score(s.sid) for s in self.submission.submitters}
        if len(finals) == 1 and None not in finals and self.overrides:
            return finals.pop()
        return self.score

    def final_score(self, sid: str) -> float | None:
        """What every export gives student `sid`: their override when there is one, else the
        score after the late penalty; None when there is neither (the grader failed)."""
        override = self.overrides.get(sid)
        if override is not None:
            return override.score
        return self.score if self.graded else None
