"""The schedule rules as a stack's config meets them: a schedule that never fires, and gaps
between runs measured in the job's zone, each named by the key to edit."""

from __future__ import annotations

from infra.settings.timing_checks import timing_advisories, timing_errors
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values

# One retry an hour after a failure: enough for an every-two-hours job, as long as its runs are
# two hours apart.
ONE_HOURLY_RETRY = {"retryCount": 1, "minBackoffSeconds": 3600, "maxBackoffSeconds": 3600}


def test_a_schedule_that_never_fires_is_refused_by_its_key() -> None:
    message = error_of(valid_values(jobs=[valid_job(schedule="59 23 31 2 *")]))
    assert (
        f"{NAMESPACE}:jobs[0].schedule: job 'every-5': schedule '59 23 31 2 *' never fires: day 31 never "
        "occurs in month 2, which has at most 29 days"
    ) in message


def test_a_leap_day_schedule_is_accepted() -> None:
    settings = build(valid_values(jobs=[valid_job(schedule="0 0 29 2 *")]))
    assert timing_errors(settings) == []


def test_a_retry_that_spring_forward_puts_on_the_next_run_is_refused() -> None:
    message = error_of(
        valid_values(
            jobs=[
                valid_job(
                    name="bihourly", schedule="0 */2 * * *", timeZone="Europe/London", retry=ONE_HOURLY_RETRY
                )
            ]
        )
    )
    assert f"{NAMESPACE}:jobs[0].retry.retryCount" in message and f"{NAMESPACE}:leaseSeconds" in message
    assert (
        "job 'bihourly': if an attempt crashes, its lease of 30s blocks the run, but the last retry arrives "
        "0s after the first attempt (no retries, before the next scheduled run 3600s later, as "
        "Europe/London's clocks go forward between the runs at 2028-03-26 00:00 GMT and 02:00 BST)"
    ) in message


def test_the_same_job_in_utc_is_accepted() -> None:
    settings = build(
        valid_values(jobs=[valid_job(name="bihourly", schedule="0 */2 * * *", retry=ONE_HOURLY_RETRY)])
    )
    assert timing_errors(settings) == [] and timing_advisories(settings) == []
