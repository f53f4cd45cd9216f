"""`@exactly_once` turns a function of one run into a Cloud Scheduler target.

    import functions_framework
    from exactly_once import RunContext, exactly_once

    @functions_framework.http
    @exactly_once
    def nightly_report(run: RunContext) -> dict | None:
        ...
        return {"rows": 1234}      # stored with the run, answered to every duplicate

`@exactly_once(target="nightly-report")` names what runs the job, recorded with every run;
by default the Cloud Run service's name (docs/jobs.md says what changing it does).

The decorated function receives the run (RunContext) instead of the HTTP request; the wrapper
reads the Scheduler headers, claims the run, calls the function at most once per run, stores
its JSON return value in the completing write, and answers Cloud Scheduler. Raise
TerminalJobError when retrying cannot help, anything else (RetryableJobError says so
explicitly) to have Cloud Scheduler retry.

The configuration (FunctionConfig: LEASE_SECONDS, RUNS_COLLECTION, the job table, ...) is read
from the environment when the function is decorated, i.e. when the instance imports the
module, so a bad value stops the instance from starting, naming the variable. Everything
that talks to Firestore is built on the first request.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, overload

import flask
from google.cloud import firestore

from exactly_once import job_logging
from exactly_once.config import FunctionConfig
from exactly_once.context import RunContext
from exactly_once.delivery.handler import MAX_BODY_BYTES, ScheduledRunHandler
from exactly_once.delivery.heartbeat import end_instance
from exactly_once.delivery.outcomes import Reply, unavailable_reply
from exactly_once.delivery.overlap import JobLocks
from exactly_once.delivery.warm_cache import CompletedRuns
from exactly_once.ledger.job_status import JobStatuses
from exactly_once.ledger.protocol import RunLedger, new_attempt_id
from exactly_once.ledger.store import FirestoreRunStore, store_deadline_for
from exactly_once.once import OncePerInstance
from exactly_once.run_writes import WriteScope

__all__ = ["CONFIG", "build_handler", "exactly_once", "firestore_client", "json_response", "request_body"]

CONFIG = FunctionConfig.from_env(os.environ)

# One client per instance, built on first use: its channel is shared by the ledger and by any
# job that keeps records of its own in the same database.
firestore_client = OncePerInstance(lambda: firestore.Client(project=CONFIG.project, database=CONFIG.database))

View = Callable[[flask.Request], flask.Response]


def build_handler(
    config: FunctionConfig, job: Callable[[RunContext], Any], target: str | None = None
) -> ScheduledRunHandler:
    # On the first request, not at import: a service that configures logging in its own main
    # module, after importing this package, keeps its configuration.
    job_logging.install()
    client = firestore_client()
    lease, retention = timedelta(seconds=config.lease_seconds), timedelta(seconds=config.retention_seconds)
    deadline = store_deadline_for(lease).total_seconds()
    store = FirestoreRunStore(client, config.runs_collection, deadline_seconds=deadline)
    ledger = RunLedger(store, lease=lease, retention=retention)
    locks = JobLocks(
        store, lease=lease, retention=retention, clock=ledger.clock, deadline_seconds=ledger.deadline_seconds
    )
    return ScheduledRunHandler(
        ledger,
        job,
        new_attempt_id=new_attempt_id,
        time_limit_seconds=config.time_limit_seconds,
        end_attempt=end_instance,
        jobs=config.jobs,
        known_jobs=config.known_jobs,
        target=target_of(config, target),
        locks=locks,
        cache=CompletedRuns(),
        statuses=JobStatuses(store, config.runs_collection, config.pause_after_failures),
        write_scope=WriteScope.of(client, config.runs_collection),
        project=config.project,
    )


def target_of(config: FunctionConfig, target: str | None = None) -> str:
    """What runs this function's jobs, as recorded with each run: the target the decorator
    was given, else the Cloud Run service. Two functions sharing a runs collection and a job
    name would otherwise answer each other's runs as duplicates, and one of them would never
    run. Never the decorated function's name: a deploy that renames it must not strand the
    runs it interrupted."""
    return config.service if target is None else target


@overload
def exactly_once(job: Callable[[RunContext], Any], /) -> View: ...
@overload
def exactly_once(*, target: str) -> Callable[[Callable[[RunContext], Any]], View]: ...
def exactly_once(
    job: Callable[[RunContext], Any] | None = None, /, *, target: str | None = None
) -> View | Callable[[Callable[[RunContext], Any]], View]:
    """Serve `job` as a Cloud Scheduler target that runs it once per scheduled run.

    `target` names what runs the job, recorded with each run (by default the Cloud Run
    service's name): a name chosen once, never derived from the code, since changing it makes
    every run recorded under the old one another function's (docs/jobs.md). It is a plain
    name, without "/", like the Cloud Run service name it replaces."""
    if target is not None and (not target.strip() or "/" in target):
        raise ValueError(f"@exactly_once(target={target!r}): a target is a non-empty name without '/'")
    if job is None:
        return lambda undecorated: _serve(undecorated, target)
    return _serve(job, target)


def _serve(job: Callable[[RunContext], Any], target: str | None) -> View:
    handler = OncePerInstance(lambda: build_handler(CONFIG, job, target))

    @functools.wraps(job)
    def view(request: flask.Request) -> flask.Response:
        try:
            built = handler()
        except Exception as error:  # no credentials, a client gone: still JSON and a log line
            reply: Reply = unavailable_reply(error)
        else:
            body = request_body(request, MAX_BODY_BYTES)
            reply = built.handle(request.method, dict(request.headers.items()), body)
        return json_response(reply.status, reply.body, reply.headers)

    return view


def request_body(request: flask.Request, limit: int) -> bytes | None:
    """At most limit + 1 bytes of the body: enough to tell "too large" without holding it.
    None when the body cannot be read (the client went away mid-body): the handler refuses
    it rather than decide a run on part of it."""
    try:
        return request.stream.read(limit + 1)
    except Exception:  # what the server raises for a broken body: a disconnect, a bad chunk
        return None


def json_response(status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> flask.Response:
    response = flask.jsonify(body)
    response.status_code = status
    response.headers.update(headers)
    return response
