"""The gap between two runs is elapsed time in the job's zone, the shortest over a year of its
clock changes: a retry is judged against when the next run really comes, not against what the
wall clock says between them."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from policy.scheduler_guardrails.rules.timing.advisories import check_wait_overlap
from policy.scheduler_guardrails.rules.timing.cron import schedule_min_interval_seconds, shortest_gap
from policy.scheduler_guardrails.rules.timing.rules import JobTiming, RetryConfig, check_job_timing

LONDON = "Europe/London"
# One retry an hour after a failure: it outlives a 30 s lease and arrives before the next run of
# an every-two-hours job, as long as that run is two hours later.
ONE_HOURLY_RETRY = RetryConfig(retry_count=1, min_backoff_seconds=3600, max_backoff_seconds=3600)
EVERY_TWO_HOURS = JobTiming(
    schedule="0 */2 * * *",
    attempt_deadline_seconds=60,
    function_timeout_seconds=60,
    lease_seconds=30,
    retention_seconds=86400,
    retry=ONE_HOURLY_RETRY,
)


def test_spring_forward_brings_two_runs_an_hour_closer() -> None:
    """London skips 01:00-02:00 on 26 March 2028: the runs at 00:00 GMT and 02:00 BST are an
    hour apart."""
    gap = shortest_gap("0 */2 * * *", LONDON)
    assert gap is not None
    assert gap.seconds == 3600
    assert gap.earlier == datetime(2028, 3, 26, 0, 0, tzinfo=ZoneInfo(LONDON))
    assert gap.later == datetime(2028, 3, 26, 2, 0, tzinfo=ZoneInfo(LONDON))
    assert gap.clock_change == -3600
    assert schedule_min_interval_seconds("0 */2 * * *", "Etc/UTC") == 7200


def test_the_retry_that_lands_on_the_next_run_is_refused_with_the_numbers() -> None:
    in_london = dataclasses.replace(EVERY_TWO_HOURS, time_zone=LONDON)
    violations = {v.rule: v for v in check_job_timing(in_london)}
    assert violations["retry-outlives-lease"].message == (
        "if an attempt crashes, its lease of 30s blocks the run, but the last retry arrives 0s after the "
        "first attempt (no retries, before the next scheduled run 3600s later, as Europe/London's clocks "
        "go forward between the runs at 2028-03-26 00:00 GMT and 02:00 BST): the run would be lost; allow "
        "more or later retries, or a shorter lease"
    )
    assert not violations["retry-outlives-lease"].advisory
    assert "longer than the 3600s between scheduled runs, as Europe/London's clocks go forward" in (
        violations["retries-fit-schedule"].message
    )


def test_the_same_job_in_utc_keeps_its_two_hours() -> None:
    assert check_job_timing(dataclasses.replace(EVERY_TWO_HOURS, time_zone="Etc/UTC")) == []
    assert check_job_timing(EVERY_TWO_HOURS) == []  # a JobTiming without a zone is read in UTC


def test_a_wait_job_is_judged_by_the_elapsed_gap_too() -> None:
    """An attempt that may take an hour (3595 s + 5 s): its waiting run's retry an hour later
    outlasts it, and it fits two hours between runs, but not the one hour of spring-forward."""
    long_job = dataclasses.replace(EVERY_TWO_HOURS, function_timeout_seconds=3600, time_limit_seconds=3595)
    assert check_wait_overlap(long_job) == []
    in_london = [v.rule for v in check_wait_overlap(dataclasses.replace(long_job, time_zone=LONDON))]
    assert in_london == ["overlap-wait-window", "overlap-wait-backlog"]


def test_a_skipped_wall_time_does_not_fire() -> None:
    """Sydney skips 02:00-03:00 on 1 October 2028: its 02:00 run never comes, so the runs at 00:00
    and 04:00 are three hours apart, and the shortest gap stays two hours."""
    assert schedule_min_interval_seconds("0 */2 * * *", "Australia/Sydney") == 7200


def test_a_repeated_wall_time_fires_once() -> None:
    """London repeats 01:00-02:00 on 29 October 2028; its 01:30 fires once, at the first
    occurrence, so a daily 01:30 is never an hour apart from itself."""
    assert schedule_min_interval_seconds("30 1 * * *", LONDON) == 86400


@pytest.mark.parametrize(
    ("schedule", "utc", "london"),
    [
        # Across fall-back (29 October 2028): 00:00 BST to 03:00 GMT is four hours, not three.
        ("0 0,3 29 10 *", 3 * 3600, 4 * 3600),
        # Across spring-forward (26 March 2028): 00:00 GMT to 03:00 BST is two hours.
        ("0 0,3 26 3 *", 3 * 3600, 2 * 3600),
    ],
)
def test_each_clock_change_moves_the_gap_across_it(schedule: str, utc: float, london: float) -> None:
    assert schedule_min_interval_seconds(schedule, "Etc/UTC") == utc
    assert schedule_min_interval_seconds(schedule, LONDON) == london


@pytest.mark.parametrize(
    "schedule",
    [
        "* * * * *",
        "*/5 * * * *",
        "5/15 * * * *",
        "0 */6 * * *",
        "0 3 * * *",
        "0 9 * * MON-FRI",
        "0 3 * * SUN",
        "30 2 * * 0,7",
        "0 0 1,31 * *",
        "0 0 29 2 *",
        "0 */2 * * *",
    ],
)
@pytest.mark.parametrize("zone", ["Asia/Kolkata", "Asia/Tokyo", "UTC"])
def test_a_zone_without_clock_changes_keeps_the_utc_numbers(schedule: str, zone: str) -> None:
    assert schedule_min_interval_seconds(schedule, zone) == schedule_min_interval_seconds(schedule, "Etc/UTC")
