"""What students may see of a report: decided here, once, as of the time it was graded.

Gradescope's visibility values, as its autograder specification defines them ("Controlling
Test Case Visibility", https://gradescope-autograders.readthedocs.io/en/latest/specs/):
`visible` is always shown; `hidden` is never shown to students; `after_due_date` is shown after
the assignment's due date (after the late due date when late submissions are allowed);
`after_published` is shown once the instructor publishes the grades. Gradescope applies them to
the test entries of results.json, and adds that "if test cases are hidden, students will not be
able to see their total score". That is not enough here: the summary at the top of results.json
is shown at once, a batch hands the files of reports/<sid>/ to students as they are, and a
student who changes one answer per resubmission reads the key off any total that counts it.

So every file a student can receive (results.json, report.json, report.md, report.html) is
written from `student_view(report)`: a result that is not shown at the grading time
(`Release.shown`) keeps its name, part, points and visibility, and nothing of its outcome
(status `withheld`, score 0, no feedback, no output, a message saying when it is shown); it
counts in no total, so the totals students see add up what they are shown, and two gradings
that differ only in withheld results give the same files (report.md says so in words, and
results.json's summary says what the score counts). With grading.yml's defaults, before the due
date that is the coding part alone. After `results_shown_at` (the due date and the late period,
`autograder.grading.late.results_shown_at`) a grading shows everything: the full score comes from
grading again then (Gradescope's "Regrade all submissions"; `autograder batch` regrades such
submissions itself, `release_due`). `hidden` and `after_published` results are never shown by
these files (publishing happens on Gradescope, after grading), which is why grading.yml and the
hidden tests give points only to `visible` and `after_due_date` results.

The full report (every outcome) is the staff's: the gradebook, `autograder grade --staff-out`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

from autograder.grading.late import SubmissionDates, results_shown_at
from autograder.grading.results import (
    PARTS,
    PartScore,
    ReleaseRecord,
    Report,
    TestResult,
    late_total,
)
from autograder.project.config import AssignmentConfig
from autograder.project.late_policy import parse_timestamp


@dataclass(frozen=True)
class Release:
    """What students are shown of one grading: it ran at `graded_at`; `after_due_date` results
    are shown from `results_shown_at` on (None: no due date is known, so not yet)."""

    graded_at: datetime
    results_shown_at: datetime | None

    @property
    def due_passed(self) -> bool:
        return self.results_shown_at is not None and self.graded_at >= self.results_shown_at

    def shown(self, visibility: str | None) -> bool:
        """Whether a result of this visibility is shown to students by this grading."""
        return visibility == "visible" or (visibility == "after_due_date" and self.due_passed)

    def when(self) -> str:
        """When `after_due_date` results are shown, in words for students."""
        if self.results_shown_at is None:
            return "after the due date (none is set yet)"
        return f"after {moment(self.results_shown_at)}"

    def note(self, visibility: str) -> str:
        """The message of a result withheld by this grading."""
        if visibility == "after_due_date":
            return (f"Shown {self.when()}, once your submission is graded again: until then it "
                    f"counts in no total.")
        if visibility == "after_published":
            return "Shown when the grades are published: until then it counts in no total."
        return "Not shown to students."

    def record(self, tests: list[TestResult]) -> ReleaseRecord:
        """`Report.release`: this release and what it withheld of `tests`."""
        withheld = [t for t in tests if t.status != "excluded" and not self.shown(t.visibility)]
        return ReleaseRecord(
            graded_at=self.graded_at.isoformat(timespec="seconds"),
            results_shown_at=self.results_shown_at.isoformat(timespec="seconds")
            if self.results_shown_at is not None else None,
            withheld=len(withheld),
            withheld_after_due_date=sum(t.visibility == "after_due_date" for t in withheld),
            withheld_points=_cents(sum(t.max_score for t in withheld)) / 100)


def moment(when: datetime) -> str:
    """'2026-12-18 00:14 -05:00': a time as shown to students, in its own time zone."""
    offset = when.isoformat(timespec="minutes")[16:] or "+00:00"
    return f"{when:%Y-%m-%d %H:%M} {'UTC' if offset in ('+00:00', 'Z') else offset}"


def release_for(config: AssignmentConfig, dates: SubmissionDates | None,
                graded_at: datetime | None = None) -> Release:
    """The release of a grading of `config`'s assignment at `graded_at` (now by default)."""
    graded_at = graded_at or datetime.now(timezone.utc)
    return Release(graded_at, results_shown_at(config, dates))


def release_of(report: Report) -> Release:
    """The release a report was graded under; for a report that does not record one (made by
    hand, or before releases were recorded), as of now against its due date."""
    if report.release:
        shown = report.release.results_shown_at
        return Release(parse_timestamp(report.release.graded_at),
                       parse_timestamp(shown) if shown else None)
    return Release(datetime.now(timezone.utc), parse_timestamp(report.due) if report.due else None)


def student_view(report: Report) -> Report:
    """The report as students may see it (see the module's docstring): results not shown at
    the grading time withheld, feedback shown only with its own visibility, every total the sum
    of what is shown (the late penalty taken off that). The same report when nothing is
    withheld; applying it twice gives the same."""
    release = release_of(report)
    tests = [_as_shown(t, release) for t in report.tests]
    cents = {part: sum(_cents(t.score) for t in tests if t.part == part) for part in PARTS}
    parts = [PartScore(p.name, cents.get(p.name, 0) / 100, p.max_score) for p in report.parts]
    functions = [replace(f, score=sum(_cents(t.score) for t in tests
                                      if t.part == f.part and t.item == f.name) / 100)
                 for f in report.functions]
    raw = sum(cents.values()) / 100
    late = score = None
    if report.late:
        late = replace(report.late, raw_score=raw)
        score = late_total(raw, report.late.penalty)
    return replace(report, tests=tests, parts=parts, functions=functions,
                   score=raw if score is None else score, late=late,
                   release=release.record(report.tests))


def _as_shown(t: TestResult, release: Release) -> TestResult:
    if t.status == "excluded" or (release.shown(t.visibility) and t.status != "withheld"):
        if t.feedback and t.feedback_visibility and not release.shown(t.feedback_visibility):
            return replace(t, feedback=[], feedback_visibility=None)
        return t
    # (its cause too: not_implemented or wrong_result would tell its outcome)
    return replace(t, score=0.0, status="withheld", cause="withheld",
                   message=release.note(t.visibility), output="", feedback=[],
                   feedback_visibility=None)


def release_due(report: Report | None, now: datetime | None = None) -> bool:
    """True when a report (as the gradebook keeps it) withheld `after_due_date` results from
    students that a grading `now` would show: grading it again gives them the full score."""
    release = report.release if report is not None else None
    if release is None or not release.withheld_after_due_date or not release.results_shown_at:
        return False
    return (now or datetime.now(timezone.utc)) >= parse_timestamp(release.results_shown_at)


def graded_for(report: Report | None, shown_at: datetime | None) -> bool:
    """True when a report (as the gradebook keeps it) was graded for results shown at
    `shown_at`: a TA's extension moves that date, and a report graded for another one shows its
    students results on the wrong day."""
    release = report.release if report is not None else None
    recorded = release.results_shown_at if release is not None else None
    return (parse_timestamp(recorded) if recorded else None) == shown_at


def _cents(value: float) -> int:
    return round(value * 100)
