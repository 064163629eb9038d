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
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from autograder.batch.records import LateStatus

POLICIES = ("none", "per_day")


@dataclass(frozen=True)
class LatePolicy:
    """grading.yml's `late` object (defaults from schemas/grading.schema.json)."""

    policy: str = "none"  # "none" | "per_day"
    percent_per_day: float = 10.0
    max_days: int | None = None  # more days late than this scores 0; None: no cut-off
    grace_minutes: float = 0.0


# ISO 8601 / RFC 3339 and the Ruby/YAML form of Gradescope exports: a 'T' or spaces between
# date and time, any number of fraction digits, and 'Z', '+hh:mm', '+hhmm' or '+hh' (optionally
# after spaces) as the zone.
_TIMESTAMP = re.compile(
    r"^\s*(?P<date>\d{4}-\d{2}-\d{2})(?:[Tt]|\s+)(?P<time>\d{2}:\d{2}(?::\d{2})?)"
    r"(?:\.(?P<fraction>\d+))?\s*(?P<zone>[Zz]|UTC|[+-]\d{2}(?::?\d{2})?)?\s*$")


def parse_timestamp(value: str | datetime) -> datetime:
    """A timezone-aware datetime from a datetime or an ISO 8601-like text.

    Raises ValueError, naming the value, when it cannot be read or has no time zone.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"the time {value.isoformat()} has no time zone")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a date and time, found {type(value).__name__} {value!r}")
    match = _TIMESTAMP.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a date and time such as 2026-12-14T23:59:00-05:00")
    fraction = (match["fraction"] or "")[:6].ljust(6, "0")
    time = match["time"] if match["time"].count(":") == 2 else match["time"] + ":00"
    zone = match["zone"]
    if zone is None:
        raise ValueError(f"the time {value!r} has no time zone (add Z or an offset like -05:00)")
    if zone in ("Z", "z", "UTC"):
        tz = timezone.utc
    else:
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:] or 0)
        offset = timedelta(hours=hours, minutes=minutes)
        tz = timezone(offset if zone[0] == "+" else -offset)
    try:
        return datetime.fromisoformat(f"{match['date']}T{time}.{fraction}").replace(tzinfo=tz)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid date and time") from None


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
