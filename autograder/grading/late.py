"""Late submissions: how late, and what it costs, from grading.yml's `late` policy.

`late_status(created_at, due, policy)` gives the `LateStatus` that `autograder batch` hands to
grading (which takes `penalty` off the total) and shows in each report. The rule, `per_day`:

- a submission up to `grace_minutes` after the due date is on time;
- after that, every started day counts: days = ceil((late - grace) / 24 h), so one minute past
  the grace period is one day late, and 24 h past it too;
- the penalty is `percent_per_day` per day, capped at 100%; more than `max_days` days late
  (when set) scores 0.

Times are compared as timezone-aware datetimes only: a due date or a submission time without
a time zone is refused rather than guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from autograder.project.late_policy import POLICIES, LatePolicy, parse_timestamp


@dataclass(frozen=True)
class LateStatus:
    """How late a submission was and what that costs, from grading.yml's late policy."""

    minutes_late: float  # 0 when on time (after any grace period)
    days_late: int  # whole days, rounded up, that the penalty counts
    penalty: float  # fraction of the score taken away, 0..1
    message: str  # one sentence for the student's report


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
