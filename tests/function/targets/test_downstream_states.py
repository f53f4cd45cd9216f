"""How each proxy reads its downstream work's state from its API's own messages: the
follower's half that needs no server (the wire is covered by tests/ops/test_downstream_following.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from google.cloud import run_v2
from google.cloud.workflows.executions_v1 import Execution

from exactly_once.delivery import following
from exactly_once.ledger.downstream import Downstream, DownstreamState
from jobs import bigquery_job, cloud_run_job, workflows

ENDED = datetime(2026, 10, 16, 12, 5, tzinfo=UTC)
SUCCEEDED = run_v2.Condition.State.CONDITION_SUCCEEDED
FAILED = run_v2.Condition.State.CONDITION_FAILED


def cloud_run_execution(condition=None, message="", ended=False, **counts: int) -> run_v2.Execution:
    execution = run_v2.Execution(name="projects/p/locations/l/jobs/j/executions/e", **counts)
    if condition is not None:
        execution.conditions = [run_v2.Condition(type_="Completed", state=condition, message=message)]
    if ended:
        execution.completion_time = ENDED
    return execution


@pytest.mark.parametrize(
    ("execution", "expected"),
    [
        (cloud_run_execution(), (DownstreamState.RUNNING, None)),
        (cloud_run_execution(run_v2.Condition.State.CONDITION_PENDING), (DownstreamState.RUNNING, None)),
        (cloud_run_execution(SUCCEEDED, ended=True, succeeded_count=2), (DownstreamState.SUCCEEDED, None)),
        (
            cloud_run_execution(FAILED, "Task 0 failed: exit code 3", ended=True, failed_count=1),
            (DownstreamState.FAILED, "Task 0 failed: exit code 3"),
        ),
        (
            cloud_run_execution(FAILED, ended=True, failed_count=2),
            (DownstreamState.FAILED, "2 task(s) failed"),
        ),
        (
            cloud_run_execution(FAILED, "The execution was cancelled", ended=True, cancelled_count=1),
            (DownstreamState.CANCELLED, "The execution was cancelled"),
        ),
        (cloud_run_execution(ended=True, failed_count=1), (DownstreamState.FAILED, "1 task(s) failed")),
    ],
)
def test_a_cloud_run_execution_reads_its_completed_condition(execution, expected):
    assert cloud_run_job.execution_outcome(execution) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (Execution.State.QUEUED, DownstreamState.RUNNING),
        (Execution.State.ACTIVE, DownstreamState.RUNNING),
        (Execution.State.SUCCEEDED, DownstreamState.SUCCEEDED),
        (Execution.State.FAILED, DownstreamState.FAILED),
        (Execution.State.CANCELLED, DownstreamState.CANCELLED),
        (Execution.State.UNAVAILABLE, DownstreamState.FAILED),
    ],
)
def test_a_workflow_execution_state_maps_onto_the_runs(state, expected):
    execution = Execution(name="projects/p/locations/l/workflows/w/executions/x", state=state)
    if state == Execution.State.FAILED:
        execution.error = Execution.Error(payload='{"message": "boom"}')
    followed = workflows._followed(execution)
    assert followed.state is expected
    assert (followed.error is not None) is expected.failed
    if state == Execution.State.FAILED:
        assert followed.error == '{"message": "boom"}'


@pytest.mark.parametrize(
    ("state", "error", "expected"),
    [
        ("PENDING", None, (DownstreamState.RUNNING, None)),
        ("RUNNING", None, (DownstreamState.RUNNING, None)),
        ("DONE", None, (DownstreamState.SUCCEEDED, None)),
        (
            "DONE",
            {"reason": "invalidQuery", "message": "Syntax error"},
            (DownstreamState.FAILED, "invalidQuery: Syntax error"),
        ),
        (
            "DONE",
            {"reason": "stopped", "message": "Job cancelled"},
            (DownstreamState.CANCELLED, "stopped: Job cancelled"),
        ),
    ],
)
def test_a_bigquery_job_is_done_with_or_without_an_error_result(state, error, expected):
    followed = bigquery_job._followed("p:EU.job", SimpleNamespace(state=state, error_result=error))
    assert (followed.state, followed.error) == expected


def test_a_record_says_what_was_started_or_nothing():
    started = Downstream(
        "cloudRunJob", "projects/p/locations/l/jobs/j/executions/e", DownstreamState.FAILED, "x" * 5000
    )
    fields = started.fields()
    assert len(fields["downstream_error"]) == 2000  # the API's words, bounded
    assert Downstream.from_record(fields) == Downstream(started.kind, started.name, started.state, "x" * 2000)
    assert Downstream.from_record({}) is None
    assert Downstream.from_record({**fields, "downstream_state": "exploded"}) is None


def test_each_proxy_registers_the_follower_of_its_kind_when_imported() -> None:
    """The core names no kind: importing a proxy job's module (as the router does for every
    job at start-up) is what makes its work followable."""
    assert following.follower(cloud_run_job.CLOUD_RUN_JOB) is cloud_run_job.execution_state
    assert following.follower(workflows.WORKFLOW) is workflows.execution_state
    assert following.follower(bigquery_job.BIGQUERY) is bigquery_job.job_state
