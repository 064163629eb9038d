"""The late policy: grading.yml's `late` object and `late_status` (days rounded up after the
grace period, penalty capped, timezone-aware comparisons); one submission's late entry
(`late_entry`, with an extension) and when its after_due_date results are shown."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from repo_project import REPO

from autograder.grading.late import (
    LateStatus,
    SubmissionDates,
    late_entry,
    late_period_end,
    late_status,
    results_shown_at,
)
from autograder.project.config import ConfigError, load_config
from autograder.project.late_policy import LatePolicy, parse_timestamp
from autograder.project.paths import Project

DUE = "2026-12-14T23:59:00-05:00"
DUE_UTC = datetime(2026, 12, 15, 4, 59, tzinfo=timezone.utc)
POLICY = LatePolicy("per_day", percent_per_day=10, max_days=3, grace_minutes=15)


def at(minutes: float) -> datetime:
    """A submission time `minutes` after the due date."""
    return DUE_UTC + timedelta(minutes=minutes)


@pytest.mark.parametrize("created, due, policy", [
    (at(600), None, POLICY),
    (None, DUE, POLICY),
    (at(600), DUE, LatePolicy("none", 10, 3, 15)),
    (at(600), DUE, None),
])
def test_nothing_to_apply_gives_none(created, due, policy):
    assert late_status(created, due, policy) is None


def test_on_time_is_no_penalty():
    assert late_status(at(-30), DUE, POLICY) == LateStatus(0.0, 0, 0.0, "Submitted on time.")
    assert late_status(at(0), DUE, POLICY).penalty == 0.0


def test_within_the_grace_period_is_on_time_and_says_so():
    status = late_status(at(14.5), DUE, POLICY)
    assert (status.minutes_late, status.days_late, status.penalty) == (0.0, 0, 0.0)
    assert status.message == ("Submitted 14 minutes after the due date, within the grace period "
                              "of 15 minutes: no late penalty.")


@pytest.mark.parametrize("minutes, days, penalty", [
    (15.01, 1, 0.1),  # just past the grace period: a started day counts
    (16, 1, 0.1),
    (15 + 1440, 1, 0.1),  # exactly one day after the grace period
    (16 + 1440, 2, 0.2),
    (15 + 2 * 1440 + 1, 3, 0.3),
    (15 + 3 * 1440, 3, 0.3),
    (15 + 3 * 1440 + 1, 4, 1.0),  # more than max_days: zero
    (20 * 1440, 20, 1.0),
])
def test_days_are_rounded_up_after_the_grace_period(minutes, days, penalty):
    status = late_status(at(minutes), DUE, POLICY)
    assert status.days_late == days
    assert status.penalty == penalty  # exactly: 3 * 10% is 0.3, not 0.30000000000000004
    assert status.minutes_late == pytest.approx(minutes, abs=1e-3)  # from the due date itself


def test_messages_say_how_late_and_what_it_costs():
    assert late_status(at(125), DUE, POLICY).message == (
        "Submitted 2 hours 5 minutes after the due date: 1 day late, so 10% is taken off the "
        "score.")
    assert late_status(at(4 * 1440 + 60), DUE, POLICY).message == (
        "Submitted 4 days 1 hour after the due date: more than 3 days late, so the score is 0.")


def test_the_penalty_is_capped_at_the_whole_score_without_max_days():
    policy = LatePolicy("per_day", percent_per_day=25, max_days=None, grace_minutes=0)
    assert late_status(at(3 * 1440), DUE, policy).penalty == 0.75
    status = late_status(at(9 * 1440), DUE, policy)
    assert (status.days_late, status.penalty) == (9, 1.0)
    assert status.message.endswith("9 days late, so the score is 0.")


def test_times_are_compared_across_time_zones():
    # 23:58 in New York is 04:58 UTC the next day: on time, although its date is later.
    new_york = timezone(timedelta(hours=-5))
    assert late_status(datetime(2026, 12, 14, 23, 58, tzinfo=new_york), DUE, POLICY).penalty == 0
    tokyo = timezone(timedelta(hours=9))
    assert late_status(datetime(2026, 12, 15, 13, 58, tzinfo=tokyo), DUE, POLICY).penalty == 0
    assert late_status(datetime(2026, 12, 15, 14, 30, tzinfo=tokyo), DUE, POLICY).days_late == 1
    # The due date given as a datetime, or as UTC text, means the same.
    assert late_status(at(100), DUE_UTC, POLICY) == late_status(at(100), DUE, POLICY)
    assert late_status(at(100), "2026-12-15T04:59:00Z", POLICY) == late_status(at(100), DUE,
                                                                                POLICY)


def test_times_without_a_time_zone_are_refused_not_guessed():
    with pytest.raises(ValueError, match="has no time zone"):
        late_status(datetime(2026, 12, 16, 12, 0), DUE, POLICY)
    with pytest.raises(ValueError, match="has no time zone"):
        late_status(at(10), "2026-12-14T23:59:00", POLICY)


@pytest.mark.parametrize("text, expected", [
    ("2023-12-02 02:52:07.938335000 Z", datetime(2023, 12, 2, 2, 52, 7, 938335, timezone.utc)),
    ("2026-12-14T23:59:00-05:00", DUE_UTC),
    ("2026-12-14 23:59:00 -0500", DUE_UTC),
    ("2026-12-15T10:29+05:30", DUE_UTC),
    ("2026-12-15 04:59:00 UTC", DUE_UTC),
])
def test_timestamps_in_iso_and_gradescope_forms(text, expected):
    assert parse_timestamp(text) == expected
    assert parse_timestamp(text).tzinfo is not None


@pytest.mark.parametrize("text", ["yesterday", "2026-13-40T00:00:00Z", "", "2026-12-14"])
def test_unreadable_timestamps_say_what_they_got(text):
    with pytest.raises(ValueError, match="date and time"):
        parse_timestamp(text)


# --------------------------------------------------------------------------- grading.yml

HW = """
assignments:
  hw:
    title: Homework
    module: hw
    total: 15
    {due}
    parts:
      multiple_choice: {{points: 10}}
      coding: {{points: 5, functions: {{f: 5}}}}
    {late}
"""


def config(tmp_path, due="", late=""):
    path = tmp_path / "grading.yml"
    path.write_text(HW.format(due=due, late=late))
    return load_config(Project.of_config(path))["hw"]


def test_the_project_gives_dp_basics_a_per_day_policy():
    late = load_config(REPO)["dp_basics"].late
    assert late == LatePolicy("per_day", percent_per_day=10.0, max_days=3, grace_minutes=15.0)


def test_without_a_late_object_there_is_no_penalty(tmp_path):
    hw = config(tmp_path)
    assert hw.late == LatePolicy("none", 10.0, None, 0.0)
    assert late_status(at(5000), DUE, hw.late) is None


def test_late_defaults_come_from_the_schema(tmp_path):
    hw = config(tmp_path, due=f'due: "{DUE}"', late="late: {policy: per_day}")
    assert hw.late == LatePolicy("per_day", 10.0, None, 0.0)
    assert late_status(at(1), hw.due, hw.late).penalty == 0.1


@pytest.mark.parametrize("late, message", [
    ("late: {policy: weekly}", "assignments.hw.late.policy: 'weekly' is not one of"),
    ("late: {policy: per_day, percent_per_day: 150}",
     "assignments.hw.late.percent_per_day: 150 is greater than the maximum of 100"),
    ("late: {policy: per_day, max_days: -1}", "assignments.hw.late.max_days: -1 is less"),
    ("late: {policy: per_day, grace: 5}",
     "assignments.hw.late: Additional properties are not allowed ('grace' was unexpected)"),
])
def test_late_errors_name_the_bad_key(tmp_path, late, message):
    with pytest.raises(ConfigError) as info:
        config(tmp_path, due=f'due: "{DUE}"', late=late)
    assert message in str(info.value)


def test_a_per_day_policy_needs_a_due_date(tmp_path):
    with pytest.raises(ConfigError, match=r"late.policy is 'per_day', but the assignment has no "
                                          r"due date"):
        config(tmp_path, late="late: {policy: per_day}")


# --------------------------------------------------------------------------- one submission

DP_BASICS = load_config(REPO)["dp_basics"]  # due 2026-12-14 23:59 -05:00, 10%/day


def test_the_late_entry_of_a_submission_counts_from_grading_yml_or_an_extension():
    two_days = SubmissionDates(created_at=at(2 * 1440))
    assert late_entry(DP_BASICS, two_days) == late_status(at(2 * 1440), DUE, DP_BASICS.late)
    assert late_entry(DP_BASICS, two_days).penalty == 0.2
    # An extension of three days: on time. One that is earlier than the due date: no change.
    extended = SubmissionDates(created_at=at(2 * 1440), extended_due=at(3 * 1440))
    assert late_entry(DP_BASICS, extended).penalty == 0
    earlier = SubmissionDates(created_at=at(2 * 1440), extended_due=at(-1440))
    assert late_entry(DP_BASICS, earlier) == late_entry(DP_BASICS, two_days)
    assert late_entry(DP_BASICS, SubmissionDates()) is None and late_entry(DP_BASICS, None) is None


def test_results_are_shown_once_no_late_submission_can_earn_points():
    # 15 minutes of grace and 3 days at 10% a day: the last submission that earns is due + 3 d
    # 15 min; at 10% a day without max_days, due + 9 days (the 10th day takes it all).
    assert results_shown_at(DP_BASICS, None) == DUE_UTC + timedelta(days=3, minutes=15)
    assert late_period_end(DUE_UTC, LatePolicy("per_day", 10, None, 0)) == \
        DUE_UTC + timedelta(days=9)
    assert late_period_end(DUE_UTC, LatePolicy("per_day", 0, None, 0)) == DUE_UTC
    assert late_period_end(DUE_UTC, LatePolicy("none", 10, 3, 15)) == DUE_UTC
    # A student's extension moves their own date; Gradescope's later late due date holds it.
    extended = SubmissionDates(extended_due=at(2 * 1440))
    assert results_shown_at(DP_BASICS, extended) == at(5 * 1440 + 15)
    closes = SubmissionDates(platform_closes=at(10 * 1440))
    assert results_shown_at(DP_BASICS, closes) == at(10 * 1440)


def test_without_a_due_date_results_wait_for_one(tmp_path):
    hw = config(tmp_path)
    assert results_shown_at(hw, None) is None
    assert results_shown_at(hw, SubmissionDates(platform_closes=at(0))) == at(0)


def test_submission_dates_travel_as_json():
    dates = SubmissionDates(created_at=at(1), extended_due=None, platform_closes=at(2))
    assert SubmissionDates.from_json(json.loads(json.dumps(dates.to_json()))) == dates
