"""The downstream HTTP proxy end to end, and the shared error classification."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
import requests
from google.api_core import exceptions as google_exceptions
from google.auth import exceptions as auth_exceptions

from exactly_once import RunContext, TerminalJobError
from exactly_once.errors import RetryableJobError
from exactly_once.targets.errors import classify, error_for_status
from jobs import downstream_http
from tests.support.fake_downstream import FakeDownstream
from tests.support.google_rest_fake import HELD
from tests.support.proxy_runs import JOB_NAME, RUN_ID, deliver, proxy_env, run_record
from tests.support.proxy_time_limits import SHORT_TIME_LIMIT, ended_attempts, released_errors
from tests.support.run_contexts import run_context

HANDLER = "jobs.downstream_http:call_downstream"


@pytest.fixture
def downstream():
    fake = FakeDownstream().start()
    yield fake
    fake.stop()


@pytest.fixture
def start_server(function_servers, emulator_host, project):
    return lambda **extra: function_servers(
        proxy_env(emulator_host, project, HANDLER, DOWNSTREAM_ID_TOKEN_DISABLED="1", **extra)
    )


def body_for(downstream: FakeDownstream, **extra) -> dict[str, Any]:
    return {"url": downstream.url, "payload": {"invoice": 42}, **extra}


def test_call_carries_the_key_and_the_fence_and_duplicates_do_not_call(start_server, downstream):
    server = start_server()
    reply = deliver(server, body_for(downstream))
    assert (reply.status_code, reply.json()["outcome"]) == (200, "executed"), reply.json()
    assert deliver(server, body_for(downstream)).json()["outcome"] == "duplicate_completed"

    (call,) = downstream.calls
    assert call.path == "/apply"
    assert call.headers["Idempotency-Key"] == RUN_ID
    assert call.headers["X-Idempotency-Fence"] == str(reply.json()["fence"])
    assert "Authorization" not in call.headers
    assert call.body == {
        "idempotency_key": RUN_ID,
        "fence": reply.json()["fence"],
        "job_name": JOB_NAME,
        "schedule_time": "2026-10-16T12:00:00Z",
        "payload": {"invoice": 42},
    }


def test_a_503_then_success_retry_reuses_the_key(start_server, downstream, db):
    downstream.script = [503]
    server = start_server()
    failed = deliver(server, body_for(downstream))
    assert (failed.status_code, failed.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    retried = deliver(server, body_for(downstream))
    assert (retried.status_code, retried.json()["outcome"]) == (200, "executed")

    keys = [call.headers["Idempotency-Key"] for call in downstream.calls]
    fences = [int(call.headers["X-Idempotency-Fence"]) for call in downstream.calls]
    assert keys == [RUN_ID, RUN_ID]
    assert fences[0] < fences[1] == retried.json()["fence"]


@pytest.mark.parametrize("step", [500, 503, 429, 409, ("sleep", 3.0)], ids=str)
def test_retryable_failures_release_the_run(start_server, downstream, db, step):
    downstream.script = [step]
    server = start_server()
    reply = deliver(server, body_for(downstream, timeout_seconds=1))
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists
    assert deliver(server, body_for(downstream)).json()["outcome"] == "executed"


def test_a_call_held_past_the_time_limit_is_cut_short_and_the_run_released(
    start_server, downstream, db, log_path
):
    """A 5 s time limit, a body allowing 300 s and an answer that never comes: the call's
    timeout is what the attempt has left, so the attempt answers (released) rather than its
    instance being ended mid-call."""
    downstream.script = [HELD]
    server = start_server(**SHORT_TIME_LIMIT)
    held = deliver(server, body_for(downstream, timeout_seconds=300))
    assert (held.status_code, held.json()["outcome"]) == (500, "failed_released")
    (error,) = released_errors(log_path)
    assert f"POST {downstream.url}" in error and "Timeout" in error, error
    assert ended_attempts(log_path) == []
    assert not run_record(db).exists
    assert len(downstream.calls) == 1


def test_connection_refused_is_retryable(start_server, db):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    server = start_server()
    reply = deliver(server, {"url": f"http://127.0.0.1:{closed_port}/x"})
    assert (reply.status_code, reply.json()["outcome"]) == (500, "failed_released")
    assert not run_record(db).exists


@pytest.mark.parametrize("status", [404, 400, 403])
def test_terminal_statuses_are_recorded_and_not_retried(start_server, downstream, db, status):
    downstream.script = [status]
    server = start_server()
    reply = deliver(server, body_for(downstream))
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    record = run_record(db).to_dict()
    assert record["result"] == "terminal_failure"
    assert f"HTTP {status}" in record["error"]
    assert deliver(server, body_for(downstream)).json()["outcome"] == "duplicate_completed"
    assert len(downstream.calls) == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"url": "http://service.example/x"},  # plaintext off loopback
        {"url": "https://service.example/x", "timeout_seconds": 0},
        {"url": "https://service.example/x", "extra": 1},
        # An unauthenticated call is refused before any network traffic off loopback.
        {"url": "https://service.example/x"},
    ],
)
def test_bad_body_or_unauthenticated_off_loopback_is_terminal(start_server, db, body):
    server = start_server()
    reply = deliver(server, body)
    assert (reply.status_code, reply.json()["outcome"]) == (200, "failed_terminal")
    assert run_record(db).to_dict()["result"] == "terminal_failure"


def test_id_token_is_fetched_for_the_url_origin(downstream, monkeypatch):
    audiences = []

    def fake_token(audience: str) -> str:
        audiences.append(audience)
        return "signed-id-token"

    monkeypatch.setattr(downstream_http, "ID_TOKEN_DISABLED", False)
    monkeypatch.setattr(downstream_http, "fetch_id_token", fake_token)
    downstream_http.call_downstream(context(body_for(downstream)))
    origin = downstream.url.removesuffix("/apply")
    assert audiences == [origin]
    assert downstream.calls[0].headers["Authorization"] == "Bearer signed-id-token"


def test_id_token_failure_is_retryable(downstream, monkeypatch):
    def broken(audience: str) -> str:
        raise auth_exceptions.TransportError("metadata server unreachable")

    monkeypatch.setattr(downstream_http, "ID_TOKEN_DISABLED", False)
    monkeypatch.setattr(downstream_http, "fetch_id_token", broken)
    with pytest.raises(RetryableJobError, match="ID token"):
        downstream_http.call_downstream(context(body_for(downstream)))
    assert downstream.calls == []


def context(body: dict[str, Any]) -> RunContext:
    return run_context(json.dumps(body).encode(), run_id=RUN_ID, job_name=JOB_NAME, attempt_id="attempt")


# --- the shared classification ----------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        google_exceptions.ServiceUnavailable("x"),
        google_exceptions.DeadlineExceeded("x"),
        google_exceptions.Aborted("x"),
        google_exceptions.ResourceExhausted("x"),
        google_exceptions.InternalServerError("x"),
        google_exceptions.Unknown("x"),
        google_exceptions.Cancelled("x"),
        google_exceptions.RetryError("x", cause=None),
        requests.Timeout("x"),
        requests.ConnectionError("x"),
        auth_exceptions.RefreshError("x"),
        RuntimeError("x"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_retryable_errors(error):
    assert isinstance(classify(error, "call"), RetryableJobError)


@pytest.mark.parametrize(
    "error",
    [
        google_exceptions.NotFound("x"),
        google_exceptions.InvalidArgument("x"),
        google_exceptions.PermissionDenied("x"),
        google_exceptions.FailedPrecondition("x"),
        requests.exceptions.InvalidURL("x"),
        TerminalJobError("x"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_terminal_errors(error):
    assert isinstance(classify(error, "call"), TerminalJobError)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (500, True),
        (503, True),
        (429, True),
        (408, True),
        (409, True),
        (400, False),
        (404, False),
        (302, False),
    ],
)
def test_status_classification(status, retryable):
    assert isinstance(error_for_status(status, "call"), RetryableJobError) is retryable
