"""The one timing module and the cron reader it uses: Cloud Scheduler's retry schedule and the
invariants built on it."""

from __future__ import annotations

import dataclasses

import pytest

from policy.scheduler_guardrails.rules.timing.advisories import check_wait_overlap
from policy.scheduler_guardrails.rules.timing.cron import (
    CRON_MACROS,
    schedule_min_interval_seconds,
    unix_cron_error,
)
from policy.scheduler_guardrails.rules.timing.rules import (
    JobTiming,
    RetryConfig,
    check_job_timing,
    latest_retry_arrival_seconds,
    retry_arrivals_if_every_attempt_fails_instantly,
)

DOCUMENTED = RetryConfig(retry_count=5, min_backoff_seconds=10, max_backoff_seconds=300, max_doublings=3)


def test_backoff_matches_cloud_schedulers_documented_example():
    """10s min, 300s max, 3 doublings: 10, 20, 40, 80, 160, 240, 300, 300 (RetryConfig docs)."""
    assert [DOCUMENTED.backoff_before_retry(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 240, 300, 300]


def test_retries_stop_at_the_count():
    assert retry_arrivals_if_every_attempt_fails_instantly(DOCUMENTED) == [10, 30, 70, 150, 310]
    assert DOCUMENTED.next_retry_delay(5, 310) is None
    assert retry_arrivals_if_every_attempt_fails_instantly(RetryConfig()) == []


def test_retries_stop_at_max_retry_duration():
    capped = RetryConfig(
        retry_count=5, min_backoff_seconds=10, max_doublings=3, max_retry_duration_seconds=100
    )
    assert retry_arrivals_if_every_attempt_fails_instantly(capped) == [10, 30, 70]


def test_latest_arrival_counts_every_deadline_and_backoff():
    assert latest_retry_arrival_seconds(DOCUMENTED, attempt_deadline_seconds=60) == 60 + 5 * 60 + 310
    # With a duration limit, Scheduler may go on until both limits are reached: take the later.
    both = RetryConfig(retry_count=1, min_backoff_seconds=10, max_doublings=0, max_retry_duration_seconds=100)
    assert latest_retry_arrival_seconds(both, attempt_deadline_seconds=15) >= 100


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        ("* * * * *", 60),
        ("*/5 * * * *", 300),
        ("5/15 * * * *", 900),
        ("0 */6 * * *", 6 * 3600),
        ("0 3 * * *", 86400),
        ("0 9 * * MON-FRI", 86400),
        ("0 3 * * SUN", 7 * 86400),
        ("30 2 * * 0,7", 7 * 86400),  # 0 and 7 are both Sunday
        ("0 0 1,31 * *", 86400),  # 31 January to 1 February
        ("0 0 29 2 *", None),  # once in a leap year
    ],
)
def test_schedule_min_interval(schedule, seconds):
    assert schedule_min_interval_seconds(schedule, "Etc/UTC") == seconds


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ("every 5 minutes", "groc syntax"),
        ("*/5 * * *", "has 4 fields"),
        ("0 25 * * *", "hour value '25' is outside 0-23"),
        ("5-1 * * * *", "runs backwards"),
        ("*/0 * * * *", "step must be positive"),
        ("0 0 * FOO *", "month value 'FOO'"),
        ("0 0 ? * *", "is not unix-cron"),
    ],
)
def test_unix_cron_errors_say_why(schedule, problem):
    error = unix_cron_error(schedule)
    assert error is not None and problem in error


@pytest.mark.parametrize(("macro", "fields"), sorted(CRON_MACROS.items()))
def test_a_macro_is_refused_with_its_unix_cron_spelling(macro: str, fields: str) -> None:
    assert unix_cron_error(macro) == f"schedule {macro!r}: macros are not unix-cron: use `{fields}`"
    assert unix_cron_error(fields) is None  # what the message proposes is accepted


def test_the_macro_table_spells_what_cron_means() -> None:
    assert CRON_MACROS["@hourly"] == "0 * * * *"
    assert CRON_MACROS["@daily"] == CRON_MACROS["@midnight"] == "0 0 * * *"
    assert CRON_MACROS["@yearly"] == CRON_MACROS["@annually"] == "0 0 1 1 *"
    assert unix_cron_error("@reboot") == "schedule '@reboot': macros are not unix-cron: write the five fields"


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (
            "*/70 * * * *",
            "schedule '*/70 * * * *': minute step 70 is larger than the field's range 0-59: the step "
            "starts again each hour, so '*/70' would fire once per hour, not every 70 minutes",
        ),
        (
            "0 */25 * * *",
            "schedule '0 */25 * * *': hour step 25 is larger than the field's range 0-23: the step "
            "starts again each day, so '*/25' would fire once per day, not every 25 hours",
        ),
    ],
)
def test_a_step_larger_than_its_fields_range_is_refused(schedule: str, message: str) -> None:
    assert unix_cron_error(schedule) == message


def test_a_step_as_long_as_its_field_is_still_unix_cron() -> None:
    """`*/60` fires on the hour, as meant; only a step past the field's range is a mistake."""
    assert unix_cron_error("*/60 * * * *") is None
    assert schedule_min_interval_seconds("*/60 * * * *", "Etc/UTC") == 3600


SOUND = JobTiming(
    schedule="*/15 * * * *",
    attempt_deadline_seconds=60,
    function_timeout_seconds=60,
    lease_seconds=30,
    retention_seconds=86400,
    retry=DOCUMENTED,
)


def job(**changes) -> JobTiming:
    return dataclasses.replace(SOUND, **changes)


def rules(timing: JobTiming) -> set[str]:
    return {violation.rule for violation in check_job_timing(timing)}


def test_a_sound_job_breaks_no_rule():
    assert check_job_timing(job()) == []


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"schedule": "every 15 minutes"}, "unix-cron"),
        (
            {"attempt_deadline_seconds": 10, "function_timeout_seconds": 10, "lease_seconds": 20},
            "attempt-deadline-range",
        ),
        ({"function_timeout_seconds": 4000, "attempt_deadline_seconds": 1800}, "function-timeout-range"),
        ({"lease_seconds": 9}, "lease-renewable"),
        ({"time_limit_seconds": 56}, "time-limit-before-timeout"),
        ({"function_timeout_seconds": 5, "attempt_deadline_seconds": 15}, "time-limit-before-timeout"),
        (
            {"retry": RetryConfig(retry_count=2, min_backoff_seconds=10, max_doublings=3)},
            "retry-outlives-lease",
        ),
        ({"retry": RetryConfig(retry_count=6)}, "retry-count-range"),
        ({"retry": RetryConfig(retry_count=5, min_backoff_seconds=0)}, "backoff-range"),
        ({"retention_seconds": 600}, "retention-outlives-retries"),
    ],
)
def test_each_rule_catches_its_mistake(changes, rule):
    assert rule in rules(job(**changes))


def test_crash_recovery_only_counts_retries_before_the_next_run():
    """Every minute: retries stop at the next run, 60 s later; the last before it (30 s) ends
    inside the 30 s lease."""
    violations = {v.rule: v for v in check_job_timing(job(schedule="* * * * *"))}
    assert "retry-outlives-lease" in violations
    assert "before the next scheduled run 60s later" in violations["retry-outlives-lease"].message


def test_retries_longer_than_the_schedule_interval_are_advisory():
    (violation,) = check_job_timing(job(schedule="*/5 * * * *"))
    assert (violation.rule, violation.advisory) == ("retries-fit-schedule", True)
    assert "670s, longer than the 300s" in violation.message


def test_deadline_far_from_timeout_is_advisory():
    (violation,) = check_job_timing(job(attempt_deadline_seconds=30))
    assert (violation.rule, violation.advisory) == ("deadline-matches-timeout", True)


def test_messages_carry_the_clashing_numbers():
    (violation,) = [v for v in check_job_timing(job(lease_seconds=6)) if v.rule == "lease-renewable"]
    assert "lease 6s is shorter than 10s: renewed every 2s" in violation.message
    assert violation.fields == ("lease_seconds",)


def test_a_wait_job_needs_retries_past_the_time_limit_not_only_the_lease():
    """A running holder keeps the job for up to its time limit (its lease is renewed), so a
    waiting run's retries must outlast that."""
    short_retries = RetryConfig(retry_count=3, min_backoff_seconds=10, max_doublings=3)  # 10, 30, 70 s
    (violation,) = check_wait_overlap(job(function_timeout_seconds=300, retry=short_retries))
    assert violation.rule == "overlap-wait-window" and "295s" in violation.message
    assert check_wait_overlap(job(retry=short_retries)) == []
