"""Late submissions: how late, and what it costs, from grading.yml's `late` policy.

`late_entry(config, dates)` is the late entry of one submission, the same wherever it is graded
(`autograder batch`, Gradescope's `run_autograder`, `autograder grade --submitted-at`): grading
takes its `penalty` off the total and shows its message in each report. `dates` are what is
known of that submission (`SubmissionDates`: its time, the student's own due date for an
extension); the due date itself is grading.yml's `due`. The rule, `per_day`
(`late_status(created_at, due, policy)`):

- a submission up to `grace_minutes` after the due date is on time;
- after that, every started day counts: days = ceil((late - grace) / 24 h), so one minute past
  the grace period is one day late, and 24 h past it too;
- the penalty is `percent_per_day` per day, capped at 100%; more than `max_days` days late
  (when set) scores 0.

`results_shown_at(config, dates)` is when results whose visibility is `after_due_date` may be
shown to this student: once no submission can earn points any more (the due date, plus the late
period the policy accepts), and never before the platform's own last date (Gradescope shows such
tests only after its late due date).

Times are compared as timezone-aware datetimes only: a due date or a submission time without
a time zone is refused rather than guessed.

This is grading's, not the batch's (whose TA concepts, the submission status among them, live in
autograder.batch): every grading applies the late entry to its own report and decides from it
what its students are shown (visibility), on Gradescope as well, where no batch runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autograder.project.late_policy import POLICIES, LatePolicy, parse_timestamp

if TYPE_CHECKING:  # not imported: a Ray worker loads this before its project is unpacked
    from autograder.project.config import AssignmentConfig


@dataclass(frozen=True)
class LateStatus:
    """How late a submission was and what that costs, from grading.yml's late policy."""

    minutes_late: float  # 0 when on time (after any grace period)
    days_late: int  # whole days, rounded up, that the penalty counts
    penalty: float  # fraction of the score taken away, 0..1
    message: str  # one sentence for the student's report


@dataclass(frozen=True)
class SubmissionDates:
    """What is known of one submission's dates, besides grading.yml's `due`."""

    created_at: datetime | None = None  # when it was submitted (timezone-aware)
    # The student's own due date (an extension); it counts only when later than `due`.
    extended_due: datetime | None = None
    # The platform's last date for this submission (Gradescope's due or late due date, the
    # student's own included): `after_due_date` results are not shown before it.
    platform_closes: datetime | None = None

    def to_json(self) -> dict:
        return {name: value.isoformat() if value is not None else None
                for name, value in self.__dict__.items()}

    @classmethod
    def from_json(cls, data: dict | None) -> SubmissionDates:
        data = data or {}
        return cls(**{name: parse_timestamp(data[name]) if data.get(name) else None
                      for name in ("created_at", "extended_due", "platform_closes")})


def due_date(config: AssignmentConfig, dates: SubmissionDates | None) -> datetime | None:
    """This submission's due date: grading.yml's `due`, or the student's own when later."""
    due = parse_timestamp(config.due) if config.due else None
    extended = dates.extended_due if dates is not None else None
    if extended is not None and (due is None or extended > due):
        return extended
    return due


def late_entry(config: AssignmentConfig, dates: SubmissionDates | None) -> LateStatus | None:
    """The late entry of one submission under grading.yml's policy; None when there is none to
    apply (no submission time, no due date, policy `none`). Every path that grades calls this."""
    created = dates.created_at if dates is not None else None
    return late_status(created, due_date(config, dates), config.late)


def late_period_end(due: datetime, policy: LatePolicy | None) -> datetime:
    """The last moment a submission can still earn points: `due` itself when the policy takes
    no late work into account (`none`), else the end of the grace period plus every day that
    costs less than the whole score (at most `max_days`)."""
    if policy is None or policy.policy != "per_day":
        return due
    rate = max(0.0, float(policy.percent_per_day)) / 100.0
    days = policy.max_days
    if rate > 0:
        # A day that takes 100% off scores 0: the days before it are the last that earn.
        earning = math.ceil(round(1.0 / rate, 9)) - 1
        days = earning if days is None else min(days, earning)
    grace = timedelta(minutes=max(0.0, float(policy.grace_minutes)))
    return due + grace + timedelta(days=days or 0)


def results_shown_at(config: AssignmentConfig,
                     dates: SubmissionDates | None) -> datetime | None:
    """When this student's `after_due_date` results may be shown: the end of the late period
    after their due date, and not before the platform's last date; None (never, until a due
    date is set) when neither is known."""
    due = due_date(config, dates)
    closes = dates.platform_closes if dates is not None else None
    shown = late_period_end(due, config.late) if due is not None else None
    if closes is not None and (shown is None or closes > shown):
        return closes
    return shown


def late_status(created_at: datetime | None, due: str | datetime | None,
                policy: LatePolicy | None) -> LateStatus | None:
    """How late `created_at` is for `due` under `policy`; None when there is nothing to apply
    (no due date, no submission time, or policy `none`).

    `minutes_late` is the time past the due date itself (0 when within the grace period);
    `days_late` counts the started days after the grace period.
    """
    if policy is None or policy.policy == "none" or due is None or created_at is None:
        return None
    if policy.policy not in POLICIES:
        raise ValueError(f"unknown late policy {policy.policy!r} (expected one of "
                         f"{', '.join(POLICIES)})")
    submitted = parse_timestamp(created_at)
    deadline = parse_timestamp(due)
    grace = max(0.0, float(policy.grace_minutes))
    minutes = (submitted - deadline).total_seconds() / 60.0
    if minutes <= 0:
        return LateStatus(0.0, 0, 0.0, "Submitted on time.")
    if minutes <= grace:
        return LateStatus(0.0, 0, 0.0,
                          f"Submitted {_duration(minutes)} after the due date, within the grace "
                          f"period of {_duration(grace)}: no late penalty.")
    days = math.ceil(round((minutes - grace) / 1440.0, 9))
    rate = max(0.0, float(policy.percent_per_day)) / 100.0
    if policy.max_days is not None and days > policy.max_days:
        penalty = 1.0
        message = (f"Submitted {_duration(minutes)} after the due date: more than "
                   f"{_days(policy.max_days)} late, so the score is 0.")
    else:
        penalty = min(1.0, round(days * rate, 9))
        message = (f"Submitted {_duration(minutes)} after the due date: {_days(days)} late, so "
                   + ("the score is 0." if penalty >= 1.0 else
                      f"{_percent(penalty)} is taken off the score."))
    return LateStatus(round(minutes, 3), days, penalty, message)


def _days(days: int) -> str:
    return f"{days} day" + ("" if days == 1 else "s")


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"


def _duration(minutes: float) -> str:
    """'7 minutes', '2 hours 5 minutes', '3 days 4 hours' (rounded down to the minute)."""
    total = int(minutes + 1e-9)
    if total < 1:
        seconds = max(1, round(minutes * 60))
        return f"{seconds} second" + ("" if seconds == 1 else "s")
    days, rest = divmod(total, 1440)
    hours, mins = divmod(rest, 60)
    parts = [(days, "day"), (hours, "hour"), (mins, "minute")]
    shown = [f"{n} {unit}" + ("" if n == 1 else "s") for n, unit in parts if n]
    return " ".join(shown[:2])
