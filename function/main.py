"""Cloud Run function entry points: `handle_scheduled_job` (and `check_idempotency_token`).

Configuration and job handlers are checked at import, i.e. when the instance starts, so a bad
value fails the deployment loudly. The Firestore client is created on the first request and
then reused by every request of the instance: import stays cheap and needs no credentials.
"""

from __future__ import annotations

import os
from datetime import timedelta

import flask
import functions_framework
from config import FunctionConfig
from google.cloud import firestore
from handler import ScheduledRunHandler
from idempotency import IdempotencyTokens, TokenCheckEndpoint, TokenStoreConfig
from job_api import JobRouter
from ledger import FirestoreRunStore, RunLedger, new_attempt_id
from once import OncePerInstance

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


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> flask.Response:
    """Runs the job once per scheduled run, however often Cloud Scheduler delivers it."""
    reply = _run_handler().handle(dict(request.headers.items()), request.get_data())
    response = flask.jsonify(reply.body)
    response.status_code = reply.status
    response.headers.update(reply.headers)
    return response


@functions_framework.http
def check_idempotency_token(request: flask.Request) -> flask.Response:
    """Lets a workflow or service called twice for one token perform its step once.
    Deployed as its own function from the same source (see README, idempotent proxy)."""
    status, body = _token_endpoint().handle(request.method, request.get_data())
    response = flask.jsonify(body)
    response.status_code = status
    return response
