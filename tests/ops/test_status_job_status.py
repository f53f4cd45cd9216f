"""`ops status` shows each job's last result as the function keeps it: on a real function and
ledger, a run that succeeds, then runs that fail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import requests

from infra.plan.headers import delivery_headers
from tests.ops.conftest import Cli, DevFunction


def _past(minute: int) -> datetime:
    day = datetime.now(UTC).date() - timedelta(days=2)
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
    job = dev_function.first_job
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
