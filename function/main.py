"""Cloud Run function entry points: `handle_scheduled_job` (and `check_idempotency_token`).

Configuration and job handlers are checked at import, i.e. when the instance starts, so a bad
value fails the deployment loudly. The Firestore client is created on the first request and
then reused by every request of the instance: import stays cheap and needs no credentials.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import flask
import functions_framework
from config import FunctionConfig
from google.cloud import firestore
from handler import MAX_BODY_BYTES, ScheduledRunHandler, unavailable_reply
from idempotency import (
    MAX_TOKEN_REQUEST_BYTES,
    IdempotencyTokens,
    TokenCheckEndpoint,
    TokenStoreConfig,
    handle_token_request,
)
from job_api import JobRouter
from ledger import RunLedger, new_attempt_id
from once import OncePerInstance
from run_store import FirestoreRunStore

CONFIG = FunctionConfig.from_env(os.environ)
TOKEN_CONFIG = TokenStoreConfig.from_env(os.environ)
JOBS = JobRouter(CONFIG.job_handler, CONFIG.job_handlers)

_firestore = OncePerInstance(lambda: firestore.Client(project=CONFIG.project, database=CONFIG.database))


def _build_run_handler() -> ScheduledRunHandler:
    ledger = RunLedger(
        FirestoreRunStore(_firestore(), CONFIG.runs_collection),
        lease=timedelta(seconds=CONFIG.lease_seconds),
        retention=timedelta(seconds=CONFIG.retention_seconds),
    )
    return ScheduledRunHandler(ledger, JOBS, _firestore(), new_attempt_id=new_attempt_id)


def _build_token_endpoint() -> TokenCheckEndpoint:
    store = FirestoreRunStore(_firestore(), TOKEN_CONFIG.collection)
    return TokenCheckEndpoint(
        IdempotencyTokens(store, retention=timedelta(seconds=TOKEN_CONFIG.retention_seconds))
    )


_run_handler = OncePerInstance(_build_run_handler)
_token_endpoint = OncePerInstance(_build_token_endpoint)


def request_body(request: flask.Request, limit: int) -> bytes:
    """At most limit + 1 bytes of the body: enough to tell "too large" without holding it."""
    return request.stream.read(limit + 1)


def json_response(status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> flask.Response:
    response = flask.jsonify(body)
    response.status_code = status
    response.headers.update(headers)
    return response


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> flask.Response:
    """Runs the job once per scheduled run, however often Cloud Scheduler delivers it."""
    try:
        handler = _run_handler()
    except Exception as error:  # e.g. no credentials: still a JSON answer and a log line
        reply = unavailable_reply(error)
    else:
        body = request_body(request, MAX_BODY_BYTES)
        reply = handler.handle(request.method, dict(request.headers.items()), body)
    return json_response(reply.status, reply.body, reply.headers)


@functions_framework.http
def check_idempotency_token(request: flask.Request) -> flask.Response:
    """Lets a workflow or service called twice for one token perform its step once.
    Deployed as its own function from the same source (see README, idempotent proxy)."""
    body = request_body(request, MAX_TOKEN_REQUEST_BYTES)
    status, reply = handle_token_request(_token_endpoint, request.method, body)
    return json_response(status, reply, {})
