"""`ops status` shows each job's last result as the function keeps it, and `ops audit` counts
runs skipped late as skipped, not missed: on a real function and ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import requests

from infra.plan.headers import delivery_headers
from infra.settings.samples import DEMO_JOB
from infra.settings.stack import StackSettings
from tests.ops.conftest import Cli, DevFunction, serve_dev_function
from tests.support.clock import SESSION_DAY
from tests.support.stacks import demo_job, with_job


def _past(minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=2)
    return datetime(day.year, day.month, day.day, 10, minute, tzinfo=UTC)


def _status_line(cli: Cli, job: str) -> str:
    result = cli("status", "--job", job, "--limit", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith(f"job {job}")))
    return lines[header + 1]


def test_status_shows_the_last_success_the_last_failure_and_the_failures_since(
    dev_function: DevFunction, cli: Cli
) -> None:
    job = dev_function.demo
    assert _status_line(cli, job.name) == (
        "last success none recorded; last failure none recorded; consecutive failures 0"
    )
    assert dev_function.deliver(job, _past(0)).json()["outcome"] == "executed"
    line = _status_line(cli, job.name)
    assert line.startswith(f"last success {_past(0).strftime('%Y-%m-%dT%H:%M:%SZ')} ended ")
    assert line.endswith("; last failure none recorded; consecutive failures 0")

    failing = {"fail": True}
    for minute in (15, 30):
        reply = requests.post(
            dev_function.server.url,
            headers={
                **delivery_headers(dev_function.settings, job, _past(minute)),
                "Content-Type": "application/json",
            },
            json=failing,
            timeout=120,
        )
        assert reply.json()["outcome"] == "failed_released"
    line = _status_line(cli, job.name)
    assert line.startswith(f"last success {_past(0).strftime('%Y-%m-%dT%H:%M:%SZ')} ended ")
    assert f"last failure {_past(30).strftime('%Y-%m-%dT%H:%M:%SZ')} ended " in line
    assert "DemoJobFailure('the request body asked this run to fail')" in line
    assert line.endswith("; consecutive failures 2")


def test_audit_counts_a_run_skipped_late_as_skipped_not_missed(
    function_servers, emulator_host, project, db, log_path, dev_settings: StackSettings, cli: Cli
) -> None:
    """The stack's demo job with a starting deadline of a minute: a run delivered two days
    late is recorded skipped_late, and the audit reports it so, never as missed."""
    settings = with_job(dev_settings, DEMO_JOB, starting_deadline_seconds=60.0)
    late_job = demo_job(settings)
    function = serve_dev_function(function_servers, settings, emulator_host, project, db, log_path)
    for minute in (0, 15, 30, 45):
        assert function.deliver(late_job, _past(minute)).json()["outcome"] == "skipped_late"
    assert function.executions(late_job) == []

    stamp = "%Y-%m-%dT%H:%M:%SZ"
    window = [
        "--job",
        late_job.name,
        "--since",
        _past(0).strftime(stamp),
        "--until",
        _past(50).strftime(stamp),
    ]
    audit = cli("audit", *window)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    rows = [line for line in audit.stdout.splitlines() if "  skipped late  " in line]
    assert len(rows) == 4
    assert "after its ScheduleTime, past the job's startingDeadlineSeconds (60s)" in rows[0]
    assert "4 expected runs, 0 missed, 0 paused, 0 delivered again, 4 skipped late" in audit.stdout
