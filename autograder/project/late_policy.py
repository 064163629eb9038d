"""grading.yml's late policy as a record, and the times it reads (due dates, submission times).

Applying the policy to a submission is autograder.grading.late.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from autograder.project.settings import setting

POLICIES = ("none", "per_day")


@dataclass(frozen=True)
class LatePolicy:
    """grading.yml's `late` object (defaults from schemas/grading.schema.json)."""

    policy: str = setting("policy")  # "none" | "per_day"
    percent_per_day: float = setting("percent_per_day")
    # more days late than this scores 0; None: no cut-off
    max_days: int | None = setting("max_days")
    grace_minutes: float = setting("grace_minutes")


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
