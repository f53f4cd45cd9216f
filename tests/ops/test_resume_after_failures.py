"""`ops status` shows a job its failed runs paused, and `ops resume` ends the pause: on a real
function and ledger, with the stack's config read from a stacks folder of the test's own."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import yaml

from infra.plan.audit_job import with_audit_job
from infra.plan.headers import delivery_headers
from infra.settings.jobs import JobSettings
from infra.settings.loading import load_stack_settings
from tests.ops.conftest import Cli, DevFunction, serve_dev_function
from tests.support.clock import SESSION_DAY
from tests.support.stacks import FIXTURE_STACKS

REPO_ROOT = Path(__file__).resolve().parents[2]


def _past(minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=2)
    return datetime(day.year, day.month, day.day, 10, minute, tzinfo=UTC)


@pytest.fixture
def pausing_stack(tmp_path: Path) -> Iterator[Path]:
    """The dev fixture stack, its first job pausing after two failed runs."""
    stack = yaml.safe_load((FIXTURE_STACKS / "Pulumi.dev.yaml").read_text())
    stack["config"]["exactly-once-scheduler:jobs"][0]["pauseAfterFailures"] = 2
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack))
    yield tmp_path


def _fail(function: DevFunction, job: JobSettings, minute: int) -> str:
    reply = requests.post(
        function.server.url,
        headers={
            **delivery_headers(function.settings, job, _past(minute)),
            "Content-Type": "application/json",
        },
        json={"fail": True},
        timeout=120,
    )
    return str(reply.json()["outcome"])


def _status_line(cli: Cli, job: str) -> str:
    result = cli("status", "--job", job, "--limit", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith(f"job {job}")))
    return lines[header + 1]


def test_status_shows_the_pause_and_resume_ends_it_until_as_many_failures_again(
    function_servers, emulator_host, project, db, log_path, cli: Cli, pausing_stack: Path
) -> None:
    settings = with_audit_job(load_stack_settings("dev", root=REPO_ROOT, stacks_dir=pausing_stack))
    function = serve_dev_function(function_servers, settings, emulator_host, project, db, log_path)
    cli = dataclasses.replace(cli, stacks_dir=pausing_stack)
    job = settings.jobs[0]
    assert job.pause_after_failures == 2

    assert _status_line(cli, job.name).endswith("; failed runs in a row 0 of pauseAfterFailures 2")
    assert [_fail(function, job, minute) for minute in (0, 15)] == ["failed_released"] * 2
    assert function.deliver(job, _past(30)).json()["outcome"] == "skipped_paused"
    assert function.executions(job) == []
    line = _status_line(cli, job.name)
    assert "; PAUSED after failures since " in line
    assert f"(pauseAfterFailures 2): its runs are skipped until `ops resume --job {job.name}`" in line

    resumed = cli("resume", "--job", job.name)
    assert resumed.returncode == 0, resumed.stderr
    # After the line that names the ledger read, as every command's output starts.
    assert resumed.stdout.splitlines()[1].startswith(
        f"job {job.name} resumed (was: PAUSED after failures since "
    )
    assert _status_line(cli, job.name).endswith("; failed runs in a row 0 of pauseAfterFailures 2")
    assert function.deliver(job, _past(45)).json()["outcome"] == "executed"
    assert len(function.executions(job)) == 1

    # Two more failed runs pause it again, and it is announced again: once per pause.
    assert [_fail(function, job, minute) for minute in (50, 55)] == ["failed_released"] * 2
    assert function.deliver(job, _past(58)).json()["outcome"] == "skipped_paused"
    pauses = [line for line in function.log_lines() if line.get("event") == "job_paused_after_failures"]
    assert len(pauses) == 2


def test_resume_refuses_a_job_without_pause_after_failures_naming_it(cli: Cli) -> None:
    result = cli("resume", "--job", "nightly-report")
    assert result.returncode != 0
    assert "job 'nightly-report' has no pauseAfterFailures" in result.stderr
