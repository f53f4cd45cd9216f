"""A catch-up window may hold no more runs than the missed-run audit walks for one job
(MAX_CATCHUP_WINDOW_RUNS), counted run by run in the job's zone."""

from __future__ import annotations

import pytest

from exactly_once.audit.config import MAX_CATCHUP_WINDOW_RUNS
from policy.scheduler_guardrails.rules.timing.catchup import CatchupTiming, check_catchup_window
from policy.scheduler_guardrails.rules.timing.cron import CrowdedWindow, crowded_window

DAY = 86400.0
WEEK = 7 * DAY


def timing(schedule: str, window: float, time_zone: str = "Etc/UTC") -> CatchupTiming:
    return CatchupTiming(
        window_seconds=window,
        schedule=schedule,
        time_zone=time_zone,
        retry_window_seconds=900,
        audit_interval_seconds=3600,
        retention_seconds=30 * DAY,
    )


def test_the_cap_is_a_week_of_a_job_every_minute() -> None:
    assert MAX_CATCHUP_WINDOW_RUNS == 10_080


def test_eight_days_of_a_job_every_minute_are_too_many() -> None:
    assert crowded_window("* * * * *", "Etc/UTC", 8 * DAY, MAX_CATCHUP_WINDOW_RUNS) == CrowdedWindow(
        runs=11_520, widest_seconds=WEEK
    )


@pytest.mark.parametrize("zone", ["Etc/UTC", "Europe/London"])
def test_a_week_of_a_job_every_minute_fits(zone: str) -> None:
    """A window is (end - window, end]: a week holds 10,080 runs of a minutely job, not 10,081;
    and clock changes add none (a repeated hour fires once)."""
    assert crowded_window("* * * * *", zone, WEEK, MAX_CATCHUP_WINDOW_RUNS) is None
    assert crowded_window("* * * * *", zone, WEEK + 1, MAX_CATCHUP_WINDOW_RUNS) == CrowdedWindow(
        runs=10_081, widest_seconds=WEEK
    )


def test_runs_are_counted_not_estimated_from_the_shortest_gap() -> None:
    """Two runs a minute apart once a day: 30 days hold 60 runs, not the 43,200 the gap would
    suggest; 10,080 runs take 5,040 days."""
    assert crowded_window("0,1 0 * * *", "Etc/UTC", 30 * DAY, MAX_CATCHUP_WINDOW_RUNS) is None
    assert crowded_window("0,1 0 * * *", "Etc/UTC", 5040 * DAY, MAX_CATCHUP_WINDOW_RUNS) is None
    assert crowded_window("0,1 0 * * *", "Etc/UTC", 5040 * DAY + 1, MAX_CATCHUP_WINDOW_RUNS) == (
        CrowdedWindow(runs=10_081, widest_seconds=5040 * DAY)
    )


def test_a_window_too_long_to_list_its_runs_is_refused_by_what_a_cycle_holds() -> None:
    """Ten years of a job every minute: more runs than are listed one by one; the window holds
    at least the 2,103,840 runs of a leap-year cycle (1,461 days)."""
    ten_years = 3650 * DAY
    assert crowded_window("* * * * *", "Etc/UTC", ten_years, MAX_CATCHUP_WINDOW_RUNS) == CrowdedWindow(
        runs=1461 * 1440, widest_seconds=WEEK, exact=False
    )
    [violation] = [
        v for v in check_catchup_window(timing("* * * * *", ten_years)) if v.rule == "catchup-window-runs"
    ]
    assert "can hold at least 2103840 runs of schedule '* * * * *'" in violation.message


def test_a_rare_job_may_have_a_window_of_any_length() -> None:
    """29 February: 10,080 runs take over 40,000 years."""
    assert crowded_window("0 0 29 2 *", "Etc/UTC", 1e12, MAX_CATCHUP_WINDOW_RUNS) is None


def test_the_rule_names_the_count_the_cap_and_the_widest_window() -> None:
    [violation] = check_catchup_window(timing("* * * * *", 8 * DAY))
    assert (violation.rule, violation.fields, violation.advisory) == (
        "catchup-window-runs",
        ("window_seconds",),
        False,
    )
    assert violation.message == (
        "catch-up window 691200s can hold 11520 runs of schedule '* * * * *' in Etc/UTC, more than the "
        "10080 the missed-run audit walks for one job: the older missed runs of the window would never be "
        "delivered again; set at most 604800s"
    )
    assert check_catchup_window(timing("* * * * *", WEEK)) == []
