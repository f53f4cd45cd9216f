"""One bad value is reported once, as itself: the rules that reason from it are not run on it,
so a retry count of -1 is not also reported as a run that a crash would lose."""

from __future__ import annotations

import pytest

from policy.scheduler_guardrails.rules.timing import rules as timing
from policy.scheduler_guardrails.rules.timing.rules import JobTiming, RetryConfig
from tests.infra.conftest import NAMESPACE, error_of, valid_job, valid_values

RETRY = {"retryCount": 5, "minBackoffSeconds": 15, "maxBackoffSeconds": 300, "maxDoublings": 3}


def _lines(message: str) -> list[str]:
    return [line.removeprefix("  - ") for line in message.splitlines()[1:]]


@pytest.mark.parametrize(
    ("schedule", "time_zone"),
    [("*/15 * * * *", "Etc/UTC"), ("0 3 * * *", "Europe/Berlin")],  # the second: runs a DST change apart
)
def test_a_negative_retry_count_is_the_only_error(schedule: str, time_zone: str) -> None:
    job = valid_job(schedule=schedule, timeZone=time_zone, retry={**RETRY, "retryCount": -1})
    assert _lines(error_of(valid_values(jobs=[job]))) == [
        f"{NAMESPACE}:jobs[0].retry.retryCount: job 'every-5': retry count -1 is outside Cloud "
        "Scheduler's range 0..5"
    ]


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        ({"min_backoff_seconds": 0.0}, "backoff-range"),
        ({"max_doublings": -1}, "retry-non-negative"),
    ],
)
def test_any_retry_value_out_of_range_holds_back_the_rules_that_read_the_retries(
    bad: dict[str, float], rule: str
) -> None:
    good = {"min_backoff_seconds": 15.0, "max_backoff_seconds": 300.0, "max_doublings": 3}
    retry = RetryConfig(retry_count=5, **{**good, **bad})  # type: ignore[arg-type]
    job = JobTiming(
        schedule="0 3 * * *",
        attempt_deadline_seconds=60,
        function_timeout_seconds=60,
        lease_seconds=30,
        retention_seconds=86400,
        retry=retry,
        time_zone="Europe/Berlin",
        starting_deadline_seconds=20,  # before a crash's takeover, were the retries sound
    )
    assert [violation.rule for violation in timing.check_job_timing(job)] == [rule]


def test_two_values_each_bad_on_its_own_are_both_reported() -> None:
    job = valid_job(retry={**RETRY, "retryCount": -1})
    lines = _lines(error_of(valid_values(leaseSeconds=6, jobs=[job])))
    assert [line.split(": ")[0] for line in lines] == [
        f"{NAMESPACE}:jobs[0].retry.retryCount",
        f"{NAMESPACE}:leaseSeconds",
    ]


def test_a_rule_between_values_that_each_pass_is_still_checked() -> None:
    """No retries at all is within range, and a crashed attempt's run is then lost: said once."""
    job = valid_job(retry={**RETRY, "retryCount": 0})
    (line,) = _lines(error_of(valid_values(jobs=[job])))
    assert "if an attempt crashes, its lease of 30s blocks the run" in line
