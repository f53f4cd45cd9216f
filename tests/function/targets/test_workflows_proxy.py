"""The Workflows proxy end to end: real function server, emulator, loopback Workflows API."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from typing import Any

import grpc
import pytest

from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.token_check.tokens import IdempotencyTokens, Verdict
from localrun.function_server import FunctionServer, FunctionServerError
from tests.support.fake_workflows import FakeWorkflows
from tests.support.google_rest_fake import HELD
from tests.support.proxy_runs import JOB_NAME, RUN_ID, concurrent, deliver, proxy_env, run_record
from tests.support.proxy_time_limits import (
    SHORT_TIME_LIMIT,
    TOO_SHORT_FOR_A_CALL,
    ended_attempts,
    released_errors,
)

HANDLER = "jobs.workflows:start_workflow_execution"
WORKFLOW = "projects/acme/locations/europe-west1/workflows/nightly-report"
BODY = {"workflow": WORKFLOW, "argument": {"report": "daily", "limit": 10}}


@pytest.fixture
def fake():
    workflows = FakeWorkflows().start()
    yield workflows
    workflows.stop()


@pytest.fixture
def start_server(function_servers, emulator_host, project, fake):
    return lambda **extra: function_servers(
        proxy_env(emulator_host, project, HANDLER, WORKFLOWS_API_ENDPOINT=fake.endpoint, **extra)
    )


def arguments(fake: FakeWorkflows) -> list[dict[str, Any]]:
    return [json.loads(request.execution.argument) for request in fake.requests]


def test_one_execution_per_run_and_its_argument_carries_the_token(start_server, fake):
    server = start_server()
    first = deliver(server, BODY)
    assert (first.status_code, first.json()["outcome"]) == (200, "executed"), first.json()
    again = deliver(server, BODY)
    assert again.json()["outcome"] == "duplicate_completed"

    assert len(fake.started) == 1
    (request,) = fake.requests
    assert request.parent == WORKFLOW
    assert json.loads(request.execution.argument) == {
        "idempotency_key": RUN_ID,
        "fence": first.json()["fence"],
        "job_name": JOB_NAME,
        "schedule_time": "2026-10-16T12:00:00Z",
        "attempt_id": first.json()["attempt_id"],
        "payload": {"report": "daily", "limit": 10},
    }


def test_concurrent_duplicates_start_exactly_one_execution(start_server, fake):
    server = start_server()
    replies = concurrent(24, lambda _: deliver(server, BODY))
    outcomes = Counter(reply.json()["outcome"] for reply in replies)
    assert outcomes["executed"] == 1, outcomes
    assert {reply.status_code for reply in replies} <= {200, 409}
    assert len(fake.requests) == len(fake.started) == 1


def test_unavailable_releases_the_run_and_the_retry_starts_it_once_with_the_same_key(start_server, fake, db):
    fake.failures.append(grpc.StatusCode.UNAVAILABLE)
    server = start_server()
    failed = deliver(server, BODY)
    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    retried = deliver(server, BODY)
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed")
    assert deliver(server, BODY).json()["outcome"] == "duplicate_completed"

    assert len(fake.started) == 1
    first_try, second_try = arguments(fake)
    assert first_try["idempotency_key"] == second_try["idempotency_key"] == RUN_ID
    assert first_try["fence"] < second_try["fence"] == retried.json()["fence"]


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED]
)
def test_other_transient_codes_are_retried(start_server, fake, code):
    fake.failures.append(code)
    server = start_server()
    assert deliver(server, BODY).json()["outcome"] == "failed_released"
    assert deliver(server, BODY).json()["outcome"] == "executed"
    assert len(fake.started) == 1


@pytest.mark.parametrize("code", [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED])
def test_terminal_codes_are_recorded_and_not_retried(start_server, fake, db, code):
    fake.failures.append(code)
    server = start_server()
    reply = deliver(server, BODY)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    record = run_record(db).to_dict()
    assert record["result"] == "terminal_failure"
    assert code.name.replace("_", "").lower() in record["error"].replace("_", "").lower()
    assert deliver(server, BODY).json()["outcome"] == "duplicate_completed"
    assert len(fake.requests) == 1
    assert fake.started == []


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"workflow": "nightly-report"},
        {"workflow": WORKFLOW, "argument": [1, 2]},
        {"workflow": WORKFLOW, "argumnet": {}},
        {"workflow": WORKFLOW, "argument": {"blob": "x" * 40_000}},
    ],
)
def test_malformed_body_is_terminal_and_calls_nothing(start_server, fake, db, body):
    server = start_server()
    reply = deliver(server, body)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    assert run_record(db).to_dict()["result"] == "terminal_failure"
    assert fake.requests == []


def test_lost_response_starts_a_second_execution_that_the_token_check_stops(start_server, fake, db):
    """Why the token must reach the workflow: the first execution started, its response was
    lost, the run was released and retried. Two executions, one token: only one acts."""
    fake.failures.append(("lost", grpc.StatusCode.UNAVAILABLE))
    server = start_server()
    assert deliver(server, BODY).json()["outcome"] == "failed_released"
    assert deliver(server, BODY).json()["outcome"] == "executed"
    assert len(fake.started) == 2

    tokens = IdempotencyTokens(FirestoreRunStore(db, "idempotency_tokens"), retention=timedelta(days=1))
    params = [json.loads(execution.argument) for execution in fake.started]
    # Each execution's first step, in either order: the token check.
    verdicts = [tokens.begin(p["idempotency_key"], p["fence"]).verdict for p in reversed(params)]
    assert verdicts == [Verdict.FIRST, Verdict.STALE_FENCE]


def test_a_call_held_past_the_time_limit_is_cut_short_and_the_run_released(start_server, fake, db, log_path):
    """A 5 s time limit and a CreateExecution whose answer never comes: its deadline is what the
    attempt has left, so the attempt answers (released) rather than its instance being ended
    mid-call. The execution had started: the retry starts a second one with the same token, as
    after any lost answer (the workflow's token check lets one act)."""
    fake.failures.append(HELD)
    server = start_server(**SHORT_TIME_LIMIT)
    held = deliver(server, BODY)
    assert (held.status_code, held.json()["outcome"]) == (500, "failed_released")
    (error,) = released_errors(log_path)
    assert f"starting an execution of {WORKFLOW}" in error and "DeadlineExceeded" in error, error
    assert ended_attempts(log_path) == []
    assert not run_record(db).exists
    assert deliver(server, BODY).json()["outcome"] == "executed"
    first_try, second_try = arguments(fake)
    assert first_try["idempotency_key"] == second_try["idempotency_key"] == RUN_ID


def test_too_little_time_for_a_call_releases_the_run_and_calls_nothing(start_server, fake, db, log_path):
    server = start_server(**TOO_SHORT_FOR_A_CALL)
    reply = deliver(server, BODY)
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released")
    assert "not called" in released_errors(log_path)[0]
    assert fake.requests == [] and not run_record(db).exists


def test_plaintext_endpoint_off_loopback_stops_the_instance(emulator_host, project, log_path):
    env = proxy_env(emulator_host, project, HANDLER, WORKFLOWS_API_ENDPOINT="http://workflows.example:80")
    server = FunctionServer(env, log_path)
    with pytest.raises(FunctionServerError, match="WORKFLOWS_API_ENDPOINT"):
        server.start()
