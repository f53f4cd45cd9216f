"""A pause after failed runs (`pauseAfterFailures`) with the features it meets, on a real
function and ledger. The pause lives in the job's status document, keyed by the run key in the
stack's first region: a rename that keeps the `runKey` keeps the pause (a rename is not a way
out of a pause; `ops resume` is), and the two regions of a stack count one job's failures
together and skip its runs alike."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from infra.settings.stack import StackSettings
from tests.ops.conftest import serve_dev_function
from tests.support.clock import SESSION_DAY
from tests.support.stacks import with_job

JOB = "nightly-report"


def _at(days_back: int) -> datetime:
    """A run of the nightly job `days_back` days ago: each day is a run of its own (the pause
    counts runs, whatever their hour)."""
    day = SESSION_DAY - timedelta(days=days_back)
    return datetime(day.year, day.month, day.day, 2, 0, tzinfo=UTC)


def _pausing(settings: StackSettings, name: str) -> StackSettings:
    return with_job(settings, JOB, name=name, run_key=JOB, pause_after_failures=2, body={"sleep_seconds": 0})


def test_a_job_paused_after_failures_stays_paused_under_its_new_name(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    before = serve_dev_function(
        function_servers, _pausing(dev_settings, JOB), emulator_host, project, db, log_path
    )
    old = before.settings.job_named(JOB)
    failed = [before.deliver(old, _at(days), body=b'{"fail": true}').json()["outcome"] for days in (6, 5)]
    assert failed == ["failed_released"] * 2
    assert before.deliver(old, _at(4)).json()["outcome"] == "skipped_paused"

    after = serve_dev_function(
        function_servers, _pausing(dev_settings, "nightly-report-v2"), emulator_host, project, db, log_path
    )
    renamed = after.settings.job_named("nightly-report-v2")
    assert after.settings.scheduler_job_id(renamed) != before.settings.scheduler_job_id(old)
    reply = after.deliver(renamed, _at(3)).json()
    assert reply["outcome"] == "skipped_paused", reply
    assert after.executions(renamed) == before.executions(old) == []


def test_two_regions_count_one_jobs_failures_together_and_both_skip_its_runs(
    function_servers, emulator_host, project, db, log_path, dev_settings
) -> None:
    settings = dataclasses.replace(_pausing(dev_settings, JOB), second_region="europe-west4")
    first, second = (
        serve_dev_function(function_servers, settings, emulator_host, project, db, log_path, region=region)
        for region in settings.regions
    )
    job = settings.job_named(JOB)
    # One failed run delivered by each region: two failed runs of the job, its pause.
    assert first.deliver(job, _at(6), body=b'{"fail": true}').json()["outcome"] == "failed_released"
    assert second.deliver(job, _at(5), body=b'{"fail": true}').json()["outcome"] == "failed_released"
    # The next run, as both regions' Scheduler jobs deliver it: skipped by the first delivery,
    # answered from its record to the other, run by neither.
    outcomes = [function.deliver(job, _at(4)).json()["outcome"] for function in (second, first)]
    assert outcomes == ["skipped_paused", "skipped_paused"]
    assert first.executions(job) == []
