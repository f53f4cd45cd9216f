"""Cloud Run function entry points: `handle_scheduled_job` (and `check_idempotency_token`).

`handle_scheduled_job` is the `@exactly_once` decorator around the job router: the job for a
run is its handler in the job table (the file JOB_TABLE names, which the stack ships beside
this module), else JOB_HANDLER. A fork that prefers one function per job
writes its own module the same way (see docs/jobs.md).

Configuration and job handlers are checked at import, i.e. when the instance starts, so a bad
value fails the deployment loudly. Firestore clients are created on the first request and
then reused by every request of the instance: import stays cheap and needs no credentials.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import flask
import functions_framework

from exactly_once import RunContext, exactly_once, firestore_client, json_response, request_body
from exactly_once.decorator import CONFIG
from exactly_once.once import OncePerInstance
from exactly_once.router import JobRouter
from exactly_once.token_check.settings import TokenStoreConfig

if TYPE_CHECKING:
    from exactly_once.token_check.endpoint import TokenCheckEndpoint

TOKEN_CONFIG = TokenStoreConfig.from_env(os.environ)
JOBS = JobRouter(CONFIG.job_handler, CONFIG.job_handlers)


@functions_framework.http
@exactly_once
def handle_scheduled_job(run: RunContext) -> Any:
    """Runs the job once per scheduled run, however often Cloud Scheduler delivers it."""
    return JOBS.run(run)


def _build_token_endpoint() -> TokenCheckEndpoint:
    # The token check's code is imported by its first request, not at start-up: an instance
    # that serves scheduled runs never needs it (docs/performance.md, cold start).
    from exactly_once.ledger.store import FirestoreRunStore
    from exactly_once.token_check.endpoint import TokenCheckEndpoint
    from exactly_once.token_check.tokens import IdempotencyTokens

    store = FirestoreRunStore(firestore_client(), TOKEN_CONFIG.collection)
    return TokenCheckEndpoint(
        IdempotencyTokens(store, retention=timedelta(seconds=TOKEN_CONFIG.retention_seconds))
    )


_token_endpoint = OncePerInstance(_build_token_endpoint)


@functions_framework.http
def check_idempotency_token(request: flask.Request) -> flask.Response:
    """Lets a workflow or service called twice for one token perform its step once.
    Deployed as its own function from the same source (docs/proxy.md)."""
    from exactly_once.token_check.endpoint import MAX_TOKEN_REQUEST_BYTES, handle_token_request

    body = request_body(request, MAX_TOKEN_REQUEST_BYTES)
    headers = dict(request.headers.items())
    status, reply = handle_token_request(_token_endpoint, request.method, body, headers)
    return json_response(status, reply, {})
