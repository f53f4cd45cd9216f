"""Advisory: a run in an hour the job's zone skips or repeats, for which Cloud Scheduler documents
no rule, looked for in the year from a given day."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime

import pytest

from policy.scheduler_guardrails.rules.timing.clock_changes import (
    ClockChange,
    check_clock_changes,
    runs_in_clock_changes,
)
from policy.scheduler_guardrails.rules.timing.rules import JobTiming, RetryConfig

NIGHTLY = JobTiming(
    schedule="30 1 * * *",
    attempt_deadline_seconds=60,
    function_timeout_seconds=60,
    lease_seconds=30,
    retention_seconds=86400,
    retry=RetryConfig(retry_count=5, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3),
    time_zone="Europe/London",
)


def test_london_skips_and_repeats_one_o_clock() -> None:
    assert runs_in_clock_changes("30 1 * * *", "Europe/London", date(2027, 1, 1), date(2028, 1, 1)) == [
        ClockChange(
            datetime(2027, 3, 28, 1), datetime(2027, 3, 28, 2), True, (datetime(2027, 3, 28, 1, 30),)
        ),
        ClockChange(
            datetime(2027, 10, 31, 1), datetime(2027, 10, 31, 2), False, (datetime(2027, 10, 31, 1, 30),)
        ),
    ]


def test_the_advisory_names_the_dates_the_hours_and_the_way_out() -> None:
    [violation] = check_clock_changes(NIGHTLY, date(2027, 1, 1))
    assert (violation.rule, violation.fields, violation.advisory) == (
        "clock-change-hour",
        ("time_zone", "schedule"),
        True,
    )
    assert violation.message == (
        "schedule '30 1 * * *' in Europe/London fires in hours the zone skips or repeats (on 2027-03-28 the "
        "clocks skip 01:00-02:00 and it fires at 01:30; on 2027-10-31 the clocks repeat 01:00-02:00 and it "
        "fires at 01:30): Cloud Scheduler documents no rule for those runs (it warns that they might "
        "observe execution anomalies); set the time zone to Etc/UTC, or move the runs out of those hours"
    )


def test_only_the_year_from_the_given_day_is_looked_at() -> None:
    """From 29 March 2027: October's repeated hour, then March 2028's skipped one."""
    [violation] = check_clock_changes(NIGHTLY, date(2027, 3, 29))
    assert "on 2027-10-31 the clocks repeat" in violation.message
    assert "on 2028-03-26 the clocks skip" in violation.message
    assert "2027-03-28" not in violation.message


def test_a_day_that_does_not_run_in_the_hour_is_not_named() -> None:
    """Sundays of October only: March's skipped hour is on a Sunday too, but not in October."""
    changes = runs_in_clock_changes("30 1 * 10 SUN", "Europe/London", date(2027, 1, 1), date(2028, 1, 1))
    assert [(change.start.date(), change.skipped) for change in changes] == [(date(2027, 10, 31), False)]


def test_many_runs_in_the_hour_are_shown_in_short() -> None:
    [violation] = check_clock_changes(dataclasses.replace(NIGHTLY, schedule="* * * * *"), date(2027, 1, 1))
    assert "it fires at 01:00, 01:01, 01:02, 01:03 and 56 more" in violation.message


def test_a_change_at_midnight_is_found_on_its_own_day() -> None:
    """Santiago skips 00:00-01:00 in September and repeats 23:00-24:00 in April."""
    changes = runs_in_clock_changes("0 * * * *", "America/Santiago", date(2027, 1, 1), date(2028, 1, 1))
    assert [(c.start, c.end, c.skipped, c.runs) for c in changes] == [
        (datetime(2027, 4, 3, 23), datetime(2027, 4, 4, 0), False, (datetime(2027, 4, 3, 23),)),
        (datetime(2027, 9, 5, 0), datetime(2027, 9, 5, 1), True, (datetime(2027, 9, 5, 0),)),
    ]


@pytest.mark.parametrize(
    ("schedule", "zone"),
    [
        ("30 1 * * *", "Etc/UTC"),  # no clock changes
        ("30 1 * * *", "Asia/Kolkata"),  # none either
        ("0 9 * * *", "Europe/London"),  # runs outside the changing hour
        ("0 3 * * *", "Europe/Berlin"),  # 03:00 is after both of Berlin's changing hours
        ("30 1 * 5-9 *", "Europe/London"),  # not in March or October
    ],
)
def test_a_job_clear_of_the_changing_hours_gets_no_advisory(schedule: str, zone: str) -> None:
    job = dataclasses.replace(NIGHTLY, schedule=schedule, time_zone=zone)
    assert check_clock_changes(job, date(2027, 1, 1)) == []


def test_berlin_at_two_is_inside_both() -> None:
    [violation] = check_clock_changes(
        dataclasses.replace(NIGHTLY, schedule="0 2 * * *", time_zone="Europe/Berlin"), date(2027, 1, 1)
    )
    assert "on 2027-03-28 the clocks skip 02:00-03:00 and it fires at 02:00" in violation.message
    assert "on 2027-10-31 the clocks repeat 02:00-03:00 and it fires at 02:00" in violation.message
