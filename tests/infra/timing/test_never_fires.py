"""A schedule whose fields are each in range but that names no day that exists (31 February) is
refused by the one unix-cron check every rule goes through: Cloud Scheduler would accept it and
never run it, and the missed-run audit could not compute its runs."""

from __future__ import annotations

import dataclasses

import pytest

from policy.scheduler_guardrails.rules.timing.cron import unix_cron_error
from policy.scheduler_guardrails.rules.timing.rules import JobTiming, RetryConfig, check_job_timing

SOUND = JobTiming(
    schedule="0 3 * * *",
    attempt_deadline_seconds=60,
    function_timeout_seconds=60,
    lease_seconds=30,
    retention_seconds=86400,
    retry=RetryConfig(retry_count=5, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3),
)


@pytest.mark.parametrize(
    ("schedule", "reason"),
    [
        ("59 23 31 2 *", "day 31 never occurs in month 2, which has at most 29 days"),
        ("0 0 30 2 *", "day 30 never occurs in month 2, which has at most 29 days"),
        ("0 0 31 4 *", "day 31 never occurs in month 4, which has at most 30 days"),
        ("0 0 30,31 FEB *", "days 30, 31 never occur in month 2, which has at most 29 days"),
        ("0 0 31 4,6,9,11 *", "day 31 never occurs in months 4, 6, 9, 11, which have at most 30 days"),
        ("0 0 31 2,4 *", "day 31 never occurs in months 2, 4, which have at most 30 days"),
    ],
)
def test_a_schedule_that_names_no_real_day_is_refused_saying_why(schedule: str, reason: str) -> None:
    assert unix_cron_error(schedule) == f"schedule {schedule!r} never fires: {reason}"


@pytest.mark.parametrize(
    "schedule",
    [
        "0 0 29 2 *",  # every leap year
        "0 0 31 * *",  # in the months that have a 31st
        "0 0 30,31 2,3 *",  # in March
        "0 0 31 2 MON",  # both day fields restricted: either matches, so every Monday of February
        "0 0 * 2 *",
    ],
)
def test_a_schedule_that_fires_on_some_day_is_accepted(schedule: str) -> None:
    assert unix_cron_error(schedule) is None


def test_the_timing_rules_refuse_it_by_the_schedule() -> None:
    [violation] = check_job_timing(dataclasses.replace(SOUND, schedule="0 0 31 4 *"))
    assert (violation.rule, violation.fields, violation.advisory) == ("unix-cron", ("schedule",), False)
    assert violation.message == (
        "schedule '0 0 31 4 *' never fires: day 31 never occurs in month 4, which has at most 30 days"
    )


def test_a_leap_day_job_breaks_no_timing_rule() -> None:
    assert check_job_timing(dataclasses.replace(SOUND, schedule="0 0 29 2 *")) == []
