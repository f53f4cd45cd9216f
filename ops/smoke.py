"""`smoke`: after `pulumi up`, prove the deployment works end to end, one step at a time.

1. force-run a job through the Cloud Scheduler API (what the schedule will do): by default
   the stack's own missed-run audit, never one of your jobs unless you name it,
2. wait for its run record to reach `completed` (Scheduler -> function -> ledger),
3. check that the ledger's TTL policy is active (records will expire, retries still dedup).

Each step prints PASS or FAIL and, on failure, the likely fix. The two APIs are called through
Google's own client libraries (google-cloud-scheduler, the Firestore admin client), so
credentials, retries and errors behave as in every other Google client. Their endpoints can be
pointed elsewhere (flags or environment): that is how the tests drive them against loopback
fakes speaking the same REST protocol.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

import requests
from google.api_core import exceptions as api_exceptions
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud.firestore_admin_v1 import FirestoreAdminClient
from google.cloud.firestore_admin_v1.types import Field
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.scheduler_v1 import CloudSchedulerClient

from exactly_once.ledger.fields import CLAIMED_AT, EXPIRE_AT
from infra.settings.jobs import AUDIT_JOB_NAME, JobSettings
from ops.context import StackContext, UserError, is_loopback, utc_now
from ops.exit_codes import ExitCode

SCHEDULER_ENDPOINT_ENV = "OPS_SCHEDULER_ENDPOINT"
FIRESTORE_ADMIN_ENDPOINT_ENV = "OPS_FIRESTORE_ADMIN_ENDPOINT"
SCHEDULER_API = "cloudscheduler.googleapis.com"
FIRESTORE_API = "firestore.googleapis.com"
DEFAULT_WAIT_SECONDS = 180.0
_POLL_SECONDS = 2.0
_API_TIMEOUT_SECONDS = 30.0
# What a call can fail with besides an API error: no credentials, no connection.
_UNREACHABLE = (auth_exceptions.TransportError, requests.RequestException, api_exceptions.RetryError)


@dataclass(frozen=True)
class Endpoints:
    """Where the two APIs are; None: the client library's own endpoint."""

    scheduler: str | None = None
    firestore_admin: str | None = None

    @classmethod
    def from_env(cls, scheduler: str | None = None, firestore_admin: str | None = None) -> Endpoints:
        def pick(flag: str | None, variable: str) -> str | None:
            chosen = flag or os.environ.get(variable)
            return chosen.rstrip("/") if chosen else None

        return cls(
            scheduler=pick(scheduler, SCHEDULER_ENDPOINT_ENV),
            firestore_admin=pick(firestore_admin, FIRESTORE_ADMIN_ENDPOINT_ENV),
        )


def client_options(endpoint: str | None) -> dict[str, Any]:
    """How to build an official client for `endpoint`.

    Always the REST transport: the same protocol in production and against the tests' fakes,
    so the path the tests exercise is the one operators run. A loopback endpoint (a fake)
    gets anonymous credentials; any other uses Application Default Credentials, as every
    Google client does."""
    options: dict[str, Any] = {"transport": "rest"}
    if endpoint is not None:
        options["client_options"] = ClientOptions(api_endpoint=endpoint)
        if is_loopback(endpoint):
            options["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return options


_NO_CREDENTIALS = "authenticate: `gcloud auth application-default login` ({error})"


def _reasons(error: api_exceptions.GoogleAPICallError) -> set[str]:
    """The ErrorInfo reasons of an error (SERVICE_DISABLED, ...). Over REST the details are
    JSON objects, over gRPC messages: read both alike."""
    reasons = set()
    for detail in error.details or ():
        reason = detail.get("reason") if isinstance(detail, dict) else getattr(detail, "reason", None)
        if isinstance(reason, str) and reason:
            reasons.add(reason)
    return reasons


def _service_disabled(error: api_exceptions.GoogleAPICallError) -> bool:
    return isinstance(error, api_exceptions.Forbidden) and (
        "SERVICE_DISABLED" in _reasons(error) or "has not been used" in error.message
    )


def _caller_refused(error: api_exceptions.GoogleAPICallError) -> bool:
    """The caller's identity was refused, not the deployment found wanting: the smoke test
    could not look, which is CLOUD_UNREACHABLE and not a failed step."""
    return isinstance(error, api_exceptions.Unauthorized) or (
        isinstance(error, api_exceptions.Forbidden) and not _service_disabled(error)
    )


def _likely_fix(api: str, error: api_exceptions.GoogleAPICallError) -> str:
    """The fix an operator most likely needs for a failed Google API call. REST answers map
    to the HTTP-status classes (Unauthorized, Forbidden), gRPC ones to their subclasses."""
    reasons = _reasons(error)
    text = " ".join([*sorted(reasons), error.message]).strip()
    if isinstance(error, api_exceptions.Unauthorized):
        return "authenticate: `gcloud auth application-default login`"
    if _service_disabled(error):
        return f"enable the API: `gcloud services enable {api}` (pulumi up enables it; wait a minute)"
    if isinstance(error, api_exceptions.Forbidden):
        return f"IAM: your identity lacks the permission ({text})"
    if isinstance(error, api_exceptions.NotFound):
        return "not found: is the stack deployed (`pulumi up`) and is --stack the right one?"
    return f"HTTP {error.code}: {text}"


class Smoke:
    """The three steps; `out` gets one PASS/FAIL line per step. A step that could not ask
    Google Cloud fails too, but the exit status tells it from a step that found a problem."""

    def __init__(
        self,
        context: StackContext,
        out: TextIO,
        endpoints: Endpoints,
        *,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._context = context
        self._out = out
        self._endpoints = endpoints
        self._wait = wait_seconds
        self._clock = clock
        self._found_problem = False

    def run(self, job_name: str | None) -> ExitCode:
        settings = self._context.job(job_name) if job_name else self.default_job()
        job_id = self._context.settings.scheduler_job_id(settings)
        # A little slack for the clock difference between this machine and the function.
        started = self._clock() - timedelta(seconds=5)
        passed = self._force_run(job_id) and self._wait_for_completed(job_id, started)
        passed = self._ttl_active() and passed
        self._out.write(f"smoke test of stack {self._context.stack}: {'PASS' if passed else 'FAIL'}\n")
        if passed:
            return ExitCode.OK
        # A problem found outweighs a step that could not look: the deployment is known broken.
        return ExitCode.RUN_PROBLEM if self._found_problem else ExitCode.CLOUD_UNREACHABLE

    def default_job(self) -> JobSettings:
        """The job smoke force-runs unasked: the stack's missed-run audit, which every stack
        deploys (unless missedRunAudit is false) and whose run only reads the ledger and logs
        what it finds. One of your jobs would really run: in prod, the real nightly report."""
        for job in self._context.settings.jobs:
            if job.name == AUDIT_JOB_NAME:
                return job
        raise UserError(
            f"stack {self._context.stack!r} deploys no missed-run audit (missedRunAudit: false), the job "
            "smoke force-runs by default; name one of your jobs with --job, knowing it will really run"
        )

    def _step(self, ok: bool, step: str, detail: str, *, unreachable: bool = False) -> bool:
        self._out.write(f"{'PASS' if ok else 'FAIL'}  {step}: {detail}\n")
        self._found_problem |= not ok and not unreachable
        return ok

    def _force_run(self, job_id: str) -> bool:
        context = self._context
        name = CloudSchedulerClient.job_path(context.project, context.location, job_id)
        step = f"force-run Cloud Scheduler job {job_id}"
        try:
            scheduler = CloudSchedulerClient(**client_options(self._endpoints.scheduler))
            job = scheduler.run_job(name=name, timeout=_API_TIMEOUT_SECONDS)
        except auth_exceptions.DefaultCredentialsError as error:
            return self._step(False, step, _NO_CREDENTIALS.format(error=error), unreachable=True)
        except api_exceptions.GoogleAPICallError as error:
            refused = _caller_refused(error)
            return self._step(False, step, _likely_fix(SCHEDULER_API, error), unreachable=refused)
        except _UNREACHABLE as error:
            return self._step(False, step, f"cannot reach the Cloud Scheduler API: {error}", unreachable=True)
        return self._step(True, step, f"accepted ({job.name or name})")

    def _wait_for_completed(self, job_id: str, since: datetime) -> bool:
        """Poll the ledger for a record of this job claimed since the smoke test started.
        An equality on job_name needs no composite index (and claimed_at is not indexed at
        all, see exactly_once.ledger.fields.UNINDEXED_RUN_FIELDS); the claim time is checked here."""
        step = "run record reaches completed"
        collection = self._context.firestore().collection(self._context.settings.runs_collection)
        query = collection.where(filter=FieldFilter("job_name", "==", job_id))
        deadline = time.monotonic() + self._wait
        latest: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            records = [doc.to_dict() or {} for doc in query.stream(timeout=_API_TIMEOUT_SECONDS)]
            mine = sorted(
                (
                    record
                    for record in records
                    if isinstance(claimed := record.get(CLAIMED_AT), datetime) and claimed >= since
                ),
                key=lambda record: record[CLAIMED_AT],
            )
            latest = mine[-1] if mine else latest
            if any(record.get("status") == "completed" for record in mine):
                done = next(record for record in mine if record.get("status") == "completed")
                return self._step(
                    True, step, f"result {done.get('result')} (attempt {done.get('attempt_id')})"
                )
            time.sleep(_POLL_SECONDS)
        if latest is None:
            return self._step(
                False,
                step,
                f"no run record within {self._wait:g}s: the delivery never reached the function or the "
                "ledger. Check the job's last attempt status (`gcloud scheduler jobs describe`): "
                "401/403 -> the invoker account needs roles/run.invoker and the OIDC audience must be "
                "the function URL; 404 -> wrong URL; ingress ALLOW_INTERNAL_ONLY admits Cloud Scheduler "
                "of the same project only; 500 store_error -> the runtime account's Firestore grant",
            )
        return self._step(
            False,
            step,
            f"record stuck at status {latest.get('status')!r} after {self._wait:g}s: read the function's "
            "log lines for this run (outcome, error)",
        )

    def _ttl_active(self) -> bool:
        context = self._context
        name = FirestoreAdminClient.field_path(
            context.project, context.settings.database_name, context.settings.runs_collection, EXPIRE_AT
        )
        step = f"TTL policy on {context.settings.runs_collection}.{EXPIRE_AT}"
        try:
            admin = FirestoreAdminClient(**client_options(self._endpoints.firestore_admin))
            field = admin.get_field(name=name, timeout=_API_TIMEOUT_SECONDS)
        except auth_exceptions.DefaultCredentialsError as error:
            return self._step(False, step, _NO_CREDENTIALS.format(error=error), unreachable=True)
        except api_exceptions.GoogleAPICallError as error:
            refused = _caller_refused(error)
            return self._step(False, step, _likely_fix(FIRESTORE_API, error), unreachable=refused)
        except _UNREACHABLE as error:
            return self._step(False, step, f"cannot reach the Firestore admin API: {error}", unreachable=True)
        state = field.ttl_config.state
        if state == Field.TtlConfig.State.ACTIVE:
            return self._step(True, step, "ACTIVE")
        if state == Field.TtlConfig.State.CREATING:
            return self._step(
                False, step, "still CREATING: Firestore takes up to ~10 minutes; run smoke again"
            )
        return self._step(
            False,
            step,
            f"state {state.name}: re-run `pulumi up` (the stack declares the TTL field {EXPIRE_AT})",
        )
