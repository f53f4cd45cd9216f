"""Two job features together: a job paused after its failed runs, then renamed with `runKey`
kept. The pause lives in the job's status document, which follows the run key, so the renamed
Scheduler job's runs are still skipped: a rename is not a way out of a pause (`ops resume` is).
On a real function and ledger, the old stack's function and the renamed stack's sharing it."""

from __future__ import annotations

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
