"""Renaming a job that keeps its runKey, under Pulumi mocks: the Scheduler job is a new one (its
id is its name), but nothing a run id is computed from changes: the project and location
headers, the run key the job table maps the new job id to, the audit's name for the job, and the
audit horizon the stack keeps for it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from exactly_once.audit.config import AuditConfig
from exactly_once.delivery.scheduler_request import (
    JOB_NAME_HEADER,
    SCHEDULE_TIME_HEADER,
    run_key_from_headers,
)
from exactly_once.run_key import format_rfc3339
from tests.infra.conftest import build, valid_job, valid_values
from tests.support.stack_tables import shipped_table
from tools.mocked_program import MockedStack, mock_stack

JOB = "gcp:cloudscheduler/job:Job"
OFFSET = "time:index/offset:Offset"
NOON = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)


def _stack(job: dict[str, Any]) -> MockedStack:
    catchup = {"windowSeconds": 86400}
    return mock_stack(build(valid_values(jobs=[valid_job(schedule="0 * * * *", catchup=catchup, **job)])))


@pytest.fixture(scope="module")
def before() -> MockedStack:
    return _stack({"name": "report-a", "runKey": "report"})


@pytest.fixture(scope="module")
def after() -> MockedStack:
    return _stack({"name": "report-b", "runKey": "report"})


def _scheduler_job(stack: MockedStack) -> Any:
    (job,) = [r for r in stack.of_type(JOB) if not str(r.inputs["name"]).endswith("_missed-run-audit")]
    return job


def _run_id(stack: MockedStack) -> str:
    """The run id the function computes for the job's noon run, from what the Scheduler job sends
    and the job table the function ships."""
    job = _scheduler_job(stack).inputs
    # Cloud Scheduler adds the job's id and the schedule time to the headers the job declares.
    headers = {**job["httpTarget"]["headers"], JOB_NAME_HEADER: job["name"]}
    headers[SCHEDULE_TIME_HEADER] = format_rfc3339(NOON)
    table = shipped_table(stack.resources)
    run_keys = {job: policy.run_key for job, policy in table.jobs.items() if policy.run_key is not None}
    return run_key_from_headers(headers, run_keys).run_id


def _audited(stack: MockedStack) -> list[str]:
    table = shipped_table(stack.resources)
    assert table.audit is not None
    return sorted(job.name for job in AuditConfig.from_raw(table.audit).jobs)


def test_the_rename_replaces_the_scheduler_job(before: MockedStack, after: MockedStack) -> None:
    old, new = _scheduler_job(before), _scheduler_job(after)
    assert (old.inputs["name"], new.inputs["name"]) == ("eos-prod_report-a", "eos-prod_report-b")
    assert old.urn != new.urn  # a resource of another name: Pulumi deletes the one, creates the other


def test_the_rename_changes_no_run_id_input(before: MockedStack, after: MockedStack) -> None:
    old, new = (_scheduler_job(stack).inputs["httpTarget"] for stack in (before, after))
    assert (old["headers"], old.get("body")) == (new["headers"], new.get("body"))
    assert _run_id(before) == _run_id(after)
    # The audit names the job by its key in both, so its history and catch-up carry over.
    assert _audited(before) == _audited(after) == ["eos-prod_missed-run-audit", "eos-prod_report"]
    # The audit's horizon for the job is the same resource: kept, not created anew at the rename.
    horizons = [
        sorted(r.urn for r in stack.of_type(OFFSET) if "audit-from" in r.name) for stack in (before, after)
    ]
    assert horizons[0] == horizons[1] and any(urn.endswith("audit-from-report") for urn in horizons[0])


def test_without_a_run_key_the_rename_starts_the_job_afresh() -> None:
    """What runKey is for: the same rename without one keys the runs by the new name."""
    plain_a, plain_b = _stack({"name": "report-a"}), _stack({"name": "report-b"})
    assert _run_id(plain_a) != _run_id(plain_b)
    assert all(policy.run_key is None for policy in shipped_table(plain_a.resources).jobs.values())
