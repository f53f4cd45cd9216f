"""One delivery of a scheduled run: identify it, claim it, run the job, finish it, answer.

Kept free of Flask so the same code is driven by the Functions Framework in production and
by tests; main.py only adapts the request and response.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO

from google.api_core import exceptions as google_exceptions
from google.cloud import firestore
from job_api import JobRouter, RunContext, TerminalJobError
from ledger import Claim, ClaimKind, JobResult, LeaseLost, RunAlreadyCompleted, RunInProgress, RunLedger
from scheduler_request import BadSchedulerRequest, RunKey, run_key_from_headers


class Outcome(StrEnum):
    EXECUTED = "executed"
    DUPLICATE_COMPLETED = "duplicate_completed"
    IN_PROGRESS = "in_progress"
    LEASE_TAKEN_OVER = "lease_taken_over"
    LEASE_LOST = "lease_lost"
    FAILED_RELEASED = "failed_released"
    FAILED_TERMINAL = "failed_terminal"
    BAD_REQUEST = "bad_request"
    STORE_ERROR = "store_error"


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
    Outcome.STORE_ERROR: (500, "ERROR"),
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

    def handle(self, headers: Mapping[str, str], body: bytes) -> Reply:
        started = time.perf_counter()
        entry: dict[str, Any] = {}
        try:
            outcome, message, extra_headers = self._deliver(headers, body, entry)
        finally:
            entry["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
        status, severity = _STATUS_AND_SEVERITY[outcome]
        self._log(severity, message, outcome, entry)
        reply_body = {"outcome": outcome.value, "message": message}
        reply_body.update({k: entry[k] for k in ("run_id", "attempt_id", "fence") if k in entry})
        return Reply(status, reply_body, extra_headers)

    def _deliver(
        self, headers: Mapping[str, str], body: bytes, entry: dict[str, Any]
    ) -> tuple[Outcome, str, dict[str, str]]:
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

    def _log(self, severity: str, message: str, outcome: Outcome, entry: dict[str, Any]) -> None:
        """One JSON line per request in Cloud Logging's structured format."""
        line = {"severity": severity, "message": f"{outcome.value}: {message}", "outcome": outcome.value}
        line.update(entry)
        stream = self._log_stream or sys.stdout
        stream.write(json.dumps(line, default=str) + "\n")
        stream.flush()
