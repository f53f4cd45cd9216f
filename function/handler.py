"""One delivery of a scheduled run: identify it, claim it, run the job, finish it, answer.

Kept free of Flask so the same code is driven by the Functions Framework in production and
by tests; main.py only adapts the request and response.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO

import structured_log
from google.api_core import exceptions as google_exceptions
from google.cloud import firestore
from job_api import JobRouter, RunContext, TerminalJobError
from ledger import (
    Claim,
    ClaimKind,
    ClaimTooLate,
    JobResult,
    LeaseLost,
    RunAlreadyCompleted,
    RunInProgress,
    RunLedger,
)
from scheduler_request import BadSchedulerRequest, RunKey, run_key_from_headers

# A Scheduler job's body is a few hundred bytes of parameters; anything near this is not one.
# Checked before anything is read into memory or written.
MAX_BODY_BYTES = 64 * 1024


class Outcome(StrEnum):
    EXECUTED = "executed"
    DUPLICATE_COMPLETED = "duplicate_completed"
    IN_PROGRESS = "in_progress"
    LEASE_TAKEN_OVER = "lease_taken_over"
    LEASE_LOST = "lease_lost"
    FAILED_RELEASED = "failed_released"
    FAILED_TERMINAL = "failed_terminal"
    BAD_REQUEST = "bad_request"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    BODY_TOO_LARGE = "body_too_large"
    STORE_ERROR = "store_error"
    INTERNAL_ERROR = "internal_error"


# HTTP status and log severity per outcome. Cloud Scheduler retries any non-2xx, so:
# 409 keeps it retrying while another attempt might still fail; 500 after a release lets the
# retry run at once; a terminal failure answers 200 because retrying cannot help. Never 503:
# App Engine retries it without counting it against retry_count.
_STATUS_AND_SEVERITY: dict[Outcome, tuple[int, str]] = {
    Outcome.EXECUTED: (200, "INFO"),
    Outcome.DUPLICATE_COMPLETED: (200, "INFO"),
    Outcome.IN_PROGRESS: (409, "INFO"),
    Outcome.LEASE_TAKEN_OVER: (200, "WARNING"),
    Outcome.LEASE_LOST: (409, "ERROR"),
    Outcome.FAILED_RELEASED: (500, "ERROR"),
    Outcome.FAILED_TERMINAL: (200, "ERROR"),
    Outcome.BAD_REQUEST: (400, "WARNING"),
    Outcome.METHOD_NOT_ALLOWED: (405, "WARNING"),
    Outcome.BODY_TOO_LARGE: (413, "WARNING"),
    Outcome.STORE_ERROR: (500, "ERROR"),
    Outcome.INTERNAL_ERROR: (500, "ERROR"),
}


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class ScheduledRunHandler:
    def __init__(
        self,
        ledger: RunLedger,
        jobs: JobRouter,
        db: firestore.Client,
        *,
        new_attempt_id: Callable[[], str],
        log_stream: TextIO | None = None,
    ) -> None:
        self._ledger = ledger
        self._jobs = jobs
        self._db = db
        self._new_attempt_id = new_attempt_id
        self._log_stream = log_stream

    def handle(self, method: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Answer one delivery. Whatever goes wrong, the answer is JSON and logged."""
        started = time.perf_counter()
        entry: dict[str, Any] = {}
        try:
            outcome, message, extra_headers = self._deliver(method, headers, body, entry)
        except Exception as error:  # a bug must still answer JSON and leave its log line
            entry.update(error=repr(error), traceback=traceback.format_exc())
            outcome, message, extra_headers = Outcome.INTERNAL_ERROR, "unexpected error", {}
        entry["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
        return self._reply(outcome, message, entry, extra_headers)

    def _reply(self, outcome: Outcome, message: str, entry: dict[str, Any], headers: dict[str, str]) -> Reply:
        status, severity = _STATUS_AND_SEVERITY[outcome]
        fields = {structured_log.OUTCOME: outcome.value, **entry}
        structured_log.emit(severity, f"{outcome.value}: {message}", fields, self._log_stream)
        reply_body = {"outcome": outcome.value, "message": message}
        reply_body.update({k: entry[k] for k in ("run_id", "attempt_id", "fence") if k in entry})
        return Reply(status, reply_body, headers)

    def _deliver(
        self, method: str, headers: Mapping[str, str], body: bytes, entry: dict[str, Any]
    ) -> tuple[Outcome, str, dict[str, str]]:
        if method != "POST":
            # Cloud Scheduler sends what the job says; the stack's jobs POST. Anything else
            # (a probe, a crawler, a misconfigured job) must not run the job.
            return Outcome.METHOD_NOT_ALLOWED, f"{method} does not run a job: use POST", {"Allow": "POST"}
        if len(body) > MAX_BODY_BYTES:
            return Outcome.BODY_TOO_LARGE, f"request body exceeds {MAX_BODY_BYTES} bytes", {}
        try:
            key = run_key_from_headers(headers)
        except BadSchedulerRequest as error:
            entry["header"] = error.header
            return Outcome.BAD_REQUEST, str(error), {}
        attempt_id = self._new_attempt_id()
        entry.update(
            run_id=key.run_id,
            attempt_id=attempt_id,
            job=key.job_name,
            schedule_time=key.schedule_time_rfc3339,
            project=key.project,
            location=key.location,
        )

        try:
            claim = self._ledger.claim(key, attempt_id)
        except RunAlreadyCompleted as done:
            entry["result"] = done.result
            return Outcome.DUPLICATE_COMPLETED, "duplicate of a completed run: job not run", {}
        except RunInProgress as busy:
            entry["holder_attempt_id"] = busy.holder
            entry["retry_after_s"] = busy.retry_after_seconds
            return (
                Outcome.IN_PROGRESS,
                "another attempt holds the run's lease",
                {"Retry-After": str(busy.retry_after_seconds)},
            )
        except ClaimTooLate as late:
            entry["error"] = str(late)
            return Outcome.STORE_ERROR, "Firestore answered the claim too late: job not started", {}
        except google_exceptions.GoogleAPIError as error:
            entry["error"] = repr(error)
            return Outcome.STORE_ERROR, "could not claim the run: Firestore failed", {}
        entry["fence"] = claim.fence
        entry["claim"] = claim.kind.value
        return self._run_and_finish(key, claim, body, entry)

    def _run_and_finish(
        self, key: RunKey, claim: Claim, body: bytes, entry: dict[str, Any]
    ) -> tuple[Outcome, str, dict[str, str]]:
        context = RunContext(
            run_id=claim.run_id,
            job_name=key.job_name,
            schedule_time=key.schedule_time,
            project=key.project,
            location=key.location,
            attempt_id=claim.attempt_id,
            fence=claim.fence,
            body=body,
            firestore=self._db,
        )
        try:
            try:
                self._jobs.handler_for(key.job_name)(context)
            except TerminalJobError as error:
                entry["error"] = str(error)
                self._ledger.complete(claim, JobResult.TERMINAL_FAILURE, str(error))
                return Outcome.FAILED_TERMINAL, "job failed terminally: recorded, will not be retried", {}
            except Exception as error:
                entry["error"] = repr(error)
                entry["traceback"] = traceback.format_exc()
                self._ledger.release(claim)
                return Outcome.FAILED_RELEASED, "job failed: claim released for the next retry", {}
            self._ledger.complete(claim)
        except LeaseLost:
            return (
                Outcome.LEASE_LOST,
                "lease expired during the job and another attempt took the run over: "
                "the lease is shorter than the job takes",
                {},
            )
        except google_exceptions.GoogleAPIError as error:
            entry["error"] = repr(error)
            return Outcome.STORE_ERROR, "could not record the run's end: Firestore failed", {}
        if claim.kind is ClaimKind.TOOK_OVER_LEASE:
            return Outcome.LEASE_TAKEN_OVER, "took over an expired lease and ran the job", {}
        return Outcome.EXECUTED, "job ran", {}


def unavailable_reply(error: Exception, log_stream: TextIO | None = None) -> Reply:
    """The answer when the handler itself cannot be built (no credentials, a broken client):
    the same JSON shape and log line as any other failure, never the framework's HTML page."""
    status, severity = _STATUS_AND_SEVERITY[Outcome.INTERNAL_ERROR]
    message = "the function could not start handling requests"
    fields = {structured_log.OUTCOME: Outcome.INTERNAL_ERROR.value, "error": repr(error)}
    fields["traceback"] = traceback.format_exc()
    structured_log.emit(severity, f"{Outcome.INTERNAL_ERROR.value}: {message}", fields, log_stream)
    return Reply(status, {"outcome": Outcome.INTERNAL_ERROR.value, "message": message})
