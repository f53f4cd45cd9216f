"""The Workflows proxy end to end: real function server, emulator, loopback Workflows API.
What it shares with the other proxies is in test_proxy_conformance.py; here, what only it does:
the argument carrying the token, the token check that lets one of two executions act, and its
endpoint."""

from __future__ import annotations

import json
from datetime import timedelta

import grpc
import pytest

from exactly_once.ledger.store import FirestoreRunStore
from exactly_once.token_check.tokens import IdempotencyTokens, Verdict
from localrun.function_server import FunctionServer, FunctionServerError
from tests.function.targets.proxy_kinds import WORKFLOW
from tests.function.targets.proxy_kinds import WORKFLOW_BODY as BODY
from tests.function.targets.proxy_kinds import WORKFLOWS_HANDLER as HANDLER
from tests.support.fake_workflows import FakeWorkflows
from tests.support.proxy_runs import JOB_NAME, RUN_ID, deliver, proxy_env


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


def test_the_execution_s_argument_carries_the_token_and_the_payload(start_server, fake):
    server = start_server()
    first = deliver(server, BODY)
    assert (first.status_code, first.json()["outcome"]) == (200, "executed"), first.json()
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


def test_plaintext_endpoint_off_loopback_stops_the_instance(emulator_host, project, log_path):
    env = proxy_env(emulator_host, project, HANDLER, WORKFLOWS_API_ENDPOINT="http://workflows.example:80")
    server = FunctionServer(env, log_path)
    with pytest.raises(FunctionServerError, match="WORKFLOWS_API_ENDPOINT"):
        server.start()
