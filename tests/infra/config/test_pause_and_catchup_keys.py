"""The `paused` and `catchup` job keys: parsed, and refused with the key and the numbers."""

from __future__ import annotations

import pytest

from exactly_once.audit.config import Catchup, CatchupRuns
from infra.plan.audit_job import audit_interval_seconds, retry_window_seconds
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values


def test_paused_and_catchup_are_read() -> None:
    settings = build(
        valid_values(
            jobs=[
                valid_job(name="a", paused=True),
                valid_job(name="b", catchup={"windowSeconds": 7200, "runs": "latest"}),
                valid_job(name="c", catchup={"windowSeconds": 7200}),
            ]
        )
    )
    a, b, c = settings.jobs
    assert (a.paused, a.catchup) == (True, None)
    assert (b.paused, b.catchup) == (False, Catchup(7200.0, CatchupRuns.LATEST))
    assert c.catchup == Catchup(7200.0, CatchupRuns.ALL)  # every missed run, unless asked otherwise


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ({"paused": "yes"}, "jobs[0].paused: expected true or false, got 'yes'"),
        ({"catchup": 7200}, "jobs[0].catchup: expected an object"),
        ({"catchup": {"runs": "all"}}, "jobs[0].catchup.windowSeconds: missing"),
        ({"catchup": {"windowSeconds": -5}}, "jobs[0].catchup.windowSeconds: expected a positive number"),
        ({"catchup": {"windowSeconds": "2h"}}, "jobs[0].catchup.windowSeconds: expected a number, got '2h'"),
        ({"catchup": {"windowSeconds": 7200, "runs": "some"}}, "jobs[0].catchup.runs: 'some' is not one of"),
        ({"catchup": {"windowSeconds": 7200, "window": 1}}, "jobs[0].catchup"),
    ],
)
def test_malformed_keys_are_refused_by_name(job: dict[str, object], expected: str) -> None:
    message = error_of(valid_values(jobs=[valid_job(**job)]))
    assert f"{NAMESPACE}:{expected}" in message


def test_a_window_the_audit_cannot_reach_is_refused_with_the_numbers() -> None:
    settings = build(valid_values(jobs=[valid_job(catchup={"windowSeconds": 7200})]))
    retry_window = retry_window_seconds(settings, settings.jobs[0])
    interval = audit_interval_seconds(settings)
    short = retry_window + interval - 1
    message = error_of(valid_values(jobs=[valid_job(catchup={"windowSeconds": short})]))
    assert f"{NAMESPACE}:jobs[0].catchup.windowSeconds: job 'every-5': catch-up window {short:g}s" in message
    assert f"retry window {retry_window:g}s + the audit's interval {interval:g}s" in message
    # Exactly long enough is accepted.
    build(valid_values(jobs=[valid_job(catchup={"windowSeconds": retry_window + interval})]))


def test_a_window_longer_than_the_retention_is_refused() -> None:
    message = error_of(
        valid_values(retentionSeconds=86400, jobs=[valid_job(catchup={"windowSeconds": 86401})])
    )
    assert (
        f"{NAMESPACE}:jobs[0].catchup.windowSeconds, {NAMESPACE}:retentionSeconds: job 'every-5'" in message
    )
    assert "catch-up window 86401s is longer than the ledger's retention 86400s" in message


def test_catchup_without_the_audit_is_refused() -> None:
    message = error_of(valid_values(missedRunAudit=False, jobs=[valid_job(catchup={"windowSeconds": 7200})]))
    assert (
        f"{NAMESPACE}:jobs[0].catchup.windowSeconds: job 'every-5': the stack's missed-run audit" in message
    )
    assert f"{NAMESPACE}:missedRunAudit is false" in message


def test_a_window_that_holds_more_runs_than_the_audit_walks_is_refused() -> None:
    """A job every minute: eight days are 11,520 runs, past the audit's 10,080; a week fits."""
    day = 86400
    minutely = valid_job(
        name="minutely", schedule="* * * * *", retry={"retryCount": 1, "minBackoffSeconds": 45}
    )
    long_retention = {"retentionSeconds": 10 * day, "idempotencyRetentionSeconds": 10 * day}
    message = error_of(
        valid_values(**long_retention, jobs=[{**minutely, "catchup": {"windowSeconds": 8 * day}}])
    )
    assert (
        f"{NAMESPACE}:jobs[0].catchup.windowSeconds: job 'minutely': catch-up window 691200s can hold 11520 "
        "runs of schedule '* * * * *' in Etc/UTC, more than the 10080 the missed-run audit walks for one job"
    ) in message
    assert "set at most 604800s" in message
    build(valid_values(**long_retention, jobs=[{**minutely, "catchup": {"windowSeconds": 7 * day}}]))
