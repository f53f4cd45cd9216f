"""Downstream work followed to its end, through the dev stack's real function on the emulator
with a Cloud Run job proxy added, the audit job as the stack adds it, the real `ops` CLI, and
loopback fakes of the Cloud Run Admin, Workflows and BigQuery APIs speaking their client
libraries' wire protocols. Executions succeed, fail, or never end (hang) as each test says."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from google.cloud.workflows.executions_v1 import Execution

from exactly_once import log_fields
from exactly_once.delivery.scheduler_request import RunKey
from exactly_once.targets.cloud_run_job_spec import CLOUD_RUN_JOBS_ENV
from infra.config.schema import REPO_ROOT
from infra.monitoring import log_filters
from infra.plan.audit_job import with_audit_job
from infra.plan.headers import delivery_headers
from infra.settings.environment import function_environment
from infra.settings.jobs import AUDIT_JOB_NAME, JobSettings
from infra.settings.loading import load_stack_settings
from infra.settings.stack import StackSettings
from tests.ops.conftest import Cli, DevFunction, serve_dev_function
from tests.support.clock import SESSION_DAY
from tests.support.fake_bigquery import FakeBigQuery
from tests.support.fake_cloud_run import FakeCloudRun
from tests.support.fake_workflows import FakeWorkflows
from tests.support.stacks import FIXTURE_STACKS

EXPORT = "export-every-15-minutes"
FAILURE = "container exited with code 3: table reports.daily not found"


def _day_at(hour: int, minute: int) -> datetime:
    day = SESSION_DAY - timedelta(days=1)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _stamp(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Stack:
    settings: StackSettings
    cloud_run_job: str
    stacks_dir: Path
    function: DevFunction
    cloud_run: FakeCloudRun
    workflows: FakeWorkflows
    bigquery: FakeBigQuery

    def job(self, name: str) -> JobSettings:
        return next(job for job in self.settings.jobs if job.name == name)

    def deliver(self, name: str, at: datetime) -> dict[str, Any]:
        return dict(self.function.deliver(self.job(name), at).json())

    def deliver_body(self, name: str, at: datetime, body: dict[str, Any]) -> dict[str, Any]:
        """A delivery with `body` instead of the job's own (a sample's is only known deployed)."""
        headers = delivery_headers(self.settings, self.job(name), at)
        reply = requests.post(self.function.server.url, headers=headers, json=body, timeout=120)
        return dict(reply.json())

    def audit(self, at: datetime) -> dict[str, Any]:
        reply = self.deliver(AUDIT_JOB_NAME, at)
        assert reply["outcome"] == "executed", reply
        return reply

    def record(self, name: str, at: datetime) -> dict[str, Any]:
        found = self.record_or_none(name, at)
        assert found is not None, f"no record of {name} at {at}"
        return found

    def record_or_none(self, name: str, at: datetime) -> dict[str, Any] | None:
        key = RunKey(self.settings.project, self.settings.region, self.settings.scheduler_job_id(name), at)
        document: Any = self.function.db.collection(self.settings.runs_collection).document(key.run_id)
        found: dict[str, Any] | None = document.get().to_dict()
        return found

    def events(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.function.log_lines() if line.get(log_fields.EVENT) == event]


def _stack_with_export(tmp: Path, overlap: str) -> tuple[StackSettings, Path]:
    """The dev fixture stack plus a Cloud Run job proxy every 15 minutes, in a stacks
    directory of the test's own (the CLI reads it there)."""
    stack = yaml.safe_load((FIXTURE_STACKS / "Pulumi.dev.yaml").read_text())
    jobs = stack["config"]["exactly-once-scheduler:jobs"]
    retry = jobs[0]["retry"]
    jobs.append(
        {
            "name": EXPORT,
            "schedule": "*/15 * * * *",
            "timeZone": "Etc/UTC",
            "attemptDeadlineSeconds": 60,
            "retry": retry,
            "overlap": overlap,
            "cloudRunJob": {"job": "nightly-export"},
        }
    )
    (tmp / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack))
    return with_audit_job(load_stack_settings("dev", root=REPO_ROOT, stacks_dir=tmp)), tmp


@pytest.fixture(params=["skip"])
def stack(request, tmp_path, function_servers, emulator_host, project, db, log_path) -> Iterator[Stack]:
    settings, stacks_dir = _stack_with_export(tmp_path, request.param)
    job_path = next(iter(json.loads(function_environment(settings)[CLOUD_RUN_JOBS_ENV]).values()))["job"]
    cloud_run = FakeCloudRun(jobs={job_path}).start()
    workflows = FakeWorkflows().start()
    bigquery = FakeBigQuery().start()
    endpoints = {
        "CLOUD_RUN_API_ENDPOINT": cloud_run.endpoint,
        "WORKFLOWS_API_ENDPOINT": workflows.endpoint,
        "BIGQUERY_API_ENDPOINT": bigquery.endpoint,
    }
    function = serve_dev_function(
        lambda env: function_servers({**env, **endpoints}), settings, emulator_host, project, db, log_path
    )
    yield Stack(settings, job_path, stacks_dir, function, cloud_run, workflows, bigquery)
    for fake in (cloud_run, workflows, bigquery):
        fake.stop()


def test_an_execution_that_fails_after_its_run_was_executed_is_reported_by_the_audit_and_ops(
    stack: Stack, cli: Cli
) -> None:
    at = _day_at(10, 0)
    reply = stack.deliver(EXPORT, at)
    assert reply["outcome"] == "executed", reply
    execution = reply["output"]["execution"]
    record = stack.record(EXPORT, at)
    assert (record["downstream_name"], record["downstream_state"]) == (execution, "running")
    stack.cloud_run.finish(execution, "failed", FAILURE)

    audit = stack.audit(_day_at(11, 5))

    (failed,) = stack.events(log_fields.DOWNSTREAM_FAILED)
    assert failed["severity"] == "ERROR" and failed["seen_by"] == "audit"
    assert (failed["downstream_name"], failed["downstream_state"]) == (execution, "failed")
    assert failed["downstream_error"] == FAILURE
    assert failed[log_fields.JOB] == stack.settings.scheduler_job_id(EXPORT)
    (summary,) = stack.events(log_fields.DOWNSTREAM_AUDIT)
    assert (summary["audit_run_id"], summary["failed"]) == (audit["run_id"], 1)
    assert log_filters.DOWNSTREAM_FAILURES.matches(
        log_filters.log_entry(failed, "eos-handler"), "eos-handler"
    )
    record = stack.record(EXPORT, at)
    assert (record["status"], record["downstream_state"], record["downstream_error"]) == (
        "completed",
        "failed",
        FAILURE,
    )

    status = _cli_in(cli, stack, "status", "--job", EXPORT, "--until", _stamp(at), "--limit", "1")
    assert status.returncode == 0, status.stderr
    (line,) = [line for line in status.stdout.splitlines() if line.startswith(f"  {_stamp(at)}")]
    assert "status=completed" in line and f"cloudRunJob={execution}" in line
    assert "downstream=failed" in line and FAILURE in line and line.endswith("-> downstream failed")
    audited = _cli_in(cli, stack, "audit", "--job", EXPORT, "--since", _stamp(at), "--until", _stamp(at))
    assert audited.returncode == 1, audited.stdout + audited.stderr
    assert f"{_stamp(at)}  {stack.settings.scheduler_job_id(EXPORT)}  downstream failed" in audited.stdout


def _cli_in(cli: Cli, stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI on the test's stacks directory (the export job is only there)."""
    return dataclasses.replace(cli, stacks_dir=stack.stacks_dir)(*args, stack="dev")


def test_skip_skips_the_next_run_while_the_execution_still_runs_and_not_after_it_ended(stack: Stack) -> None:
    first = stack.deliver(EXPORT, _day_at(10, 0))
    assert first["outcome"] == "executed", first
    execution = first["output"]["execution"]
    gets_before = _gets(stack.cloud_run)

    # The execution hangs: every later run is skipped while it runs, each after asking once.
    for minute in (15, 30):
        skipped = stack.deliver(EXPORT, _day_at(10, minute))
        assert skipped["outcome"] == "overlap_skipped", skipped
        assert stack.record(EXPORT, _day_at(10, minute))["result"] == "overlap_skipped"
    assert _gets(stack.cloud_run) - gets_before == 2
    assert len(stack.cloud_run.started(stack.cloud_run_job)) == 1
    assert stack.record(EXPORT, _day_at(10, 0))["downstream_state"] == "running"

    stack.cloud_run.finish(execution, "succeeded")
    after = stack.deliver(EXPORT, _day_at(10, 45))

    assert after["outcome"] == "executed", after
    assert after["output"]["execution"] != execution
    assert stack.record(EXPORT, _day_at(10, 0))["downstream_state"] == "succeeded"  # the next run recorded it
    assert stack.events(log_fields.DOWNSTREAM_FAILED) == []


@pytest.mark.parametrize("stack", ["wait"], indirect=True)
def test_wait_holds_the_next_run_back_while_the_execution_runs(stack: Stack) -> None:
    first = stack.deliver(EXPORT, _day_at(10, 0))
    assert first["outcome"] == "executed", first

    held = stack.function.deliver(stack.job(EXPORT), _day_at(10, 15))

    assert (held.status_code, held.json()["outcome"]) == (409, "overlap_wait"), held.text
    assert int(held.headers["Retry-After"]) >= 1
    assert stack.record_or_none(EXPORT, _day_at(10, 15)) is None  # nothing recorded: Cloud Scheduler retries
    stack.cloud_run.finish(first["output"]["execution"], "cancelled")
    retried = stack.deliver(EXPORT, _day_at(10, 15))
    assert retried["outcome"] == "executed", retried
    (cancelled,) = stack.events(log_fields.DOWNSTREAM_FAILED)
    assert (cancelled["downstream_state"], cancelled["seen_by"]) == ("cancelled", "overlap")


def test_the_audit_follows_workflows_and_bigquery_jobs_and_leaves_a_hanging_one_running(stack: Stack) -> None:
    workflow_run, query_run, export_run = _day_at(10, 30), _day_at(10, 45), _day_at(10, 0)
    workflow_body = {"workflow": "projects/my-gcp-project/locations/us-central1/workflows/report"}
    started = stack.deliver_body("workflow-proxy-demo", workflow_run, workflow_body)
    assert started["outcome"] == "executed", started
    queried = stack.deliver("bigquery-demo", query_run)
    assert queried["outcome"] == "executed", queried
    assert stack.deliver(EXPORT, export_run)["outcome"] == "executed"  # hangs: never finished
    (workflow,) = stack.workflows.started
    stack.workflows.finish(workflow.name, Execution.State.FAILED, "KeyError: report")
    ((project, job_id),) = stack.bigquery.jobs
    stack.bigquery.finish(project, job_id)

    audit = stack.audit(_day_at(11, 5))

    (failed,) = stack.events(log_fields.DOWNSTREAM_FAILED)
    assert (failed["downstream_kind"], failed["downstream_name"]) == ("workflow", workflow.name)
    assert failed["downstream_error"] == "KeyError: report"
    assert stack.record("bigquery-demo", query_run)["downstream_state"] == "succeeded"
    assert stack.record(EXPORT, export_run)["downstream_state"] == "running"
    (summary,) = stack.events(log_fields.DOWNSTREAM_AUDIT)
    assert (summary["failed"], summary["succeeded"], summary["running"]) == (1, 1, 1), summary
    assert summary["audit_run_id"] == audit["run_id"]
    # The next audit asks only about the one still running.
    calls = stack.workflows.gets, len(stack.bigquery.calls), _gets(stack.cloud_run)
    assert calls[0] == 1
    stack.audit(_day_at(12, 5))
    assert (stack.workflows.gets, len(stack.bigquery.calls), _gets(stack.cloud_run)) == (
        calls[0],
        calls[1],
        calls[2] + 1,
    )
    assert stack.events(log_fields.DOWNSTREAM_AUDIT)[-1]["running"] == 1


def _gets(fake: FakeCloudRun) -> int:
    return sum(method == "GET" and "/executions/" in path for method, path in fake.calls)


def test_an_api_that_does_not_answer_counts_as_the_execution_still_running(stack: Stack) -> None:
    first = stack.deliver(EXPORT, _day_at(10, 0))
    assert first["outcome"] == "executed", first
    stack.cloud_run.failures.append(503)  # the next call: the skip job's question

    skipped = stack.deliver(EXPORT, _day_at(10, 15))

    assert skipped["outcome"] == "overlap_skipped", skipped
    (warning,) = [
        line
        for line in stack.function.log_lines()
        if str(line.get("message", "")).startswith("could not ask about")
    ]
    assert warning["severity"] == "WARNING" and warning["downstream_name"] == first["output"]["execution"]
    assert stack.record(EXPORT, _day_at(10, 0))["downstream_state"] == "running"
