"""The schedule rules as a stack's config meets them: a schedule that never fires, gaps between
runs measured in the job's zone, and runs in an hour the zone skips or repeats, each named by
the key to edit."""

from __future__ import annotations

from infra.settings.timing_checks import timing_errors
from tests.infra.conftest import NAMESPACE, build, error_of, valid_job, valid_values


def test_a_schedule_that_never_fires_is_refused_by_its_key() -> None:
    message = error_of(valid_values(jobs=[valid_job(schedule="59 23 31 2 *")]))
    assert (
        f"{NAMESPACE}:jobs[0].schedule: job 'every-5': schedule '59 23 31 2 *' never fires: day 31 never "
        "occurs in month 2, which has at most 29 days"
    ) in message


def test_a_leap_day_schedule_is_accepted() -> None:
    settings = build(valid_values(jobs=[valid_job(schedule="0 0 29 2 *")]))
    assert timing_errors(settings) == []
