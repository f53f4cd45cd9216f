"""Cloud Run function entry point: `handle_scheduled_job`.

Configuration and job handlers are checked at import, i.e. when the instance starts, so a bad
value fails the deployment loudly. The Firestore client is created on the first request and
then reused by every request of the instance: import stays cheap and needs no credentials.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import flask
import functions_framework
from config import FunctionConfig
from google.cloud import firestore
from handler import ScheduledRunHandler
from idempotency import IdempotencyTokens, TokenCheckEndpoint, TokenStoreConfig
from job_api import JobRouter
from ledger import FirestoreRunStore, RunLedger, new_attempt_id

CONFIG = FunctionConfig.from_env(os.environ)
JOBS = JobRouter(CONFIG.job_handler, CONFIG.job_handlers)

_handler: ScheduledRunHandler | None = None
_handler_lock = threading.Lock()


def _scheduled_run_handler() -> ScheduledRunHandler:
    global _handler
    if _handler is None:
        with _handler_lock:
            if _handler is None:
                db = firestore.Client(project=CONFIG.project, database=CONFIG.database)
                ledger = RunLedger(
                    FirestoreRunStore(db, CONFIG.runs_collection),
                    lease=timedelta(seconds=CONFIG.lease_seconds),
                    retention=timedelta(seconds=CONFIG.retention_seconds),
                )
                _handler = ScheduledRunHandler(ledger, JOBS, db, new_attempt_id=new_attempt_id)
    return _handler


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> flask.Response:
    """Runs the job once per scheduled run, however often Cloud Scheduler delivers it."""
    reply = _scheduled_run_handler().handle(dict(request.headers.items()), request.get_data())
    response = flask.jsonify(reply.body)
    response.status_code = reply.status
    response.headers.update(reply.headers)
    return response


# --- the downstream token check: a second entry point, deployed as its own function ----

TOKEN_CONFIG = TokenStoreConfig.from_env(os.environ)
_token_endpoint: TokenCheckEndpoint | None = None
_token_endpoint_lock = threading.Lock()


def _token_check_endpoint() -> TokenCheckEndpoint:
    global _token_endpoint
    if _token_endpoint is None:
        with _token_endpoint_lock:
            if _token_endpoint is None:
                db = firestore.Client(project=CONFIG.project, database=CONFIG.database)
                store = FirestoreRunStore(db, TOKEN_CONFIG.collection)
                tokens = IdempotencyTokens(store, retention=timedelta(seconds=TOKEN_CONFIG.retention_seconds))
                _token_endpoint = TokenCheckEndpoint(tokens)
    return _token_endpoint


@functions_framework.http
def check_idempotency_token(request: flask.Request) -> flask.Response:
    """Lets a workflow or service called twice for one token perform its step once."""
    status, body = _token_check_endpoint().handle(request.method, request.get_data())
    response = flask.jsonify(body)
    response.status_code = status
    return response
