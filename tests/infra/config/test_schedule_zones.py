"""The schedule rules as a stack's config meets them: a schedule that never fires, gaps between
runs measured in the job's zone, and runs in an hour the zone skips or repeats, each named by
the key to edit."""

from __future__ import annotations

from datetime import date

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
    assert timing_errors(settings) == [] and timing_advisories(settings, date(2027, 1, 1)) == []


def test_a_run_in_a_changing_hour_is_an_advisory_naming_the_keys() -> None:
    settings = build(
        valid_values(jobs=[valid_job(name="nightly", schedule="30 1 * * *", timeZone="Europe/London")])
    )
    assert timing_errors(settings) == []
    assert timing_advisories(settings, date(2027, 1, 1)) == [
        f"{NAMESPACE}:jobs[0].timeZone, {NAMESPACE}:jobs[0].schedule: job 'nightly': schedule '30 1 * * *' "
        "in Europe/London fires in hours the zone skips or repeats (on 2027-03-28 the clocks skip "
        "01:00-02:00 and it fires at 01:30; on 2027-10-31 the clocks repeat 01:00-02:00 and it fires at "
        "01:30): Cloud Scheduler documents no rule for those runs (it warns that they might observe "
        "execution anomalies); set the time zone to Etc/UTC, or move the runs out of those hours"
    ]


def test_jobs_clear_of_the_changing_hours_get_no_advisory() -> None:
    settings = build(
        valid_values(
            jobs=[
                valid_job(name="utc", schedule="30 1 * * *"),
                valid_job(name="morning", schedule="0 9 * * *", timeZone="Europe/London"),
                valid_job(name="berlin", schedule="0 3 * * *", timeZone="Europe/Berlin"),
            ]
        )
    )
    assert timing_advisories(settings, date(2027, 1, 1)) == []
