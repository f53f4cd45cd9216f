"""One delivery of a scheduled run: identify it, claim it, run the job, finish it, answer.

Kept free of Flask so the same code is driven by the Functions Framework in production and
by tests; main.py only adapts the request and response.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO

import log_fields
import strict_json
import structured_log
from config import OverlapPolicy
from google.api_core import exceptions as google_exceptions
from job_api import JobHandler, RunContext, encode_output
from job_errors import TerminalJobError
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
from overlap import JobBusy, JobLock, JobLocks
from scheduler_request import BadSchedulerRequest, RunKey, run_key_from_headers
from warm_cache import CompletedRuns

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
    OVERLAP_SKIPPED = "overlap_skipped"
    OVERLAP_WAIT = "overlap_wait"
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
    Outcome.OVERLAP_SKIPPED: (200, "INFO"),
    Outcome.OVERLAP_WAIT: (409, "INFO"),
    Outcome.BAD_REQUEST: (400, "WARNING"),
    Outcome.METHOD_NOT_ALLOWED: (405, "WARNING"),
    Outcome.BODY_TOO_LARGE: (413, "WARNING"),
    Outcome.STORE_ERROR: (500, "ERROR"),
    Outcome.INTERNAL_ERROR: (500, "ERROR"),
}


# Answers that carry the run's stored output.
_WITH_OUTPUT = frozenset({Outcome.EXECUTED, Outcome.LEASE_TAKEN_OVER, Outcome.DUPLICATE_COMPLETED})
# What a duplicate of a completed run is answered, by the recorded result.
_DUPLICATE_OUTCOME = {JobResult.OVERLAP_SKIPPED.value: Outcome.OVERLAP_SKIPPED}


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Answer:
    """What one delivery came to: the outcome, its message, and what the reply carries
    besides the log line's fields (the output is answered, never logged)."""

    outcome: Outcome
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    output_json: str | None = None


class ScheduledRunHandler:
    """Claim, run, finish, answer; plus the per-job overlap policy and the warm cache."""

    def __init__(
        self,
        ledger: RunLedger,
        job: JobHandler,
        *,
        new_attempt_id: Callable[[], str],
        overlap: Mapping[str, OverlapPolicy] | None = None,
        locks: JobLocks | None = None,
        cache: CompletedRuns | None = None,
        log_stream: TextIO | None = None,
    ) -> None:
        self._ledger = ledger
        self._job = job
        self._new_attempt_id = new_attempt_id
        self._overlap = dict(overlap or {})
        if self._overlap and locks is None:
            raise ValueError("an overlap policy needs JobLocks")
        self._locks = locks
        self._cache = cache if cache is not None else CompletedRuns()
        self._log_stream = log_stream

    def handle(self, method: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Answer one delivery. Whatever goes wrong, the answer is JSON and logged."""
        started = time.perf_counter()
        entry: dict[str, Any] = {}
        try:
            answer = self._deliver(method, headers, body, entry)
        except Exception as error:  # a bug must still answer JSON and leave its log line
            entry.update(error=repr(error), traceback=traceback.format_exc())
            answer = Answer(Outcome.INTERNAL_ERROR, "unexpected error")
        entry[log_fields.LATENCY_MS] = round((time.perf_counter() - started) * 1000, 3)
        return self._reply(answer, entry)

    def _reply(self, answer: Answer, entry: dict[str, Any]) -> Reply:
        outcome = answer.outcome
        status, severity = _STATUS_AND_SEVERITY[outcome]
        fields = {log_fields.OUTCOME: outcome.value, **entry}
        structured_log.emit(severity, f"{outcome.value}: {answer.message}", fields, self._log_stream)
        reply_body: dict[str, Any] = {"outcome": outcome.value, "message": answer.message}
        reply_body.update({k: entry[k] for k in ("run_id", "attempt_id", "fence", "result") if k in entry})
        if outcome in _WITH_OUTPUT:
            output = answer.output_json
            reply_body["output"] = strict_json.loads(output) if output is not None else None
        return Reply(status, reply_body, answer.headers)

    def _deliver(self, method: str, headers: Mapping[str, str], body: bytes, entry: dict[str, Any]) -> Answer:
        if method != "POST":
            # Cloud Scheduler sends what the job says; the stack's jobs POST. Anything else
            # (a probe, a crawler, a misconfigured job) must not run the job.
            return Answer(
                Outcome.METHOD_NOT_ALLOWED, f"{method} does not run a job: use POST", {"Allow": "POST"}
            )
        if len(body) > MAX_BODY_BYTES:
            return Answer(Outcome.BODY_TOO_LARGE, f"request body exceeds {MAX_BODY_BYTES} bytes")
        try:
            key = run_key_from_headers(headers)
        except BadSchedulerRequest as error:
            entry["header"] = error.header
            return Answer(Outcome.BAD_REQUEST, str(error))
        entry.update(
            {
                log_fields.RUN_ID: key.run_id,
                log_fields.JOB: key.job_name,
                log_fields.SCHEDULE_TIME: key.schedule_time_rfc3339,
                "project": key.project,
                "location": key.location,
            }
        )
        if (seen := self._cache.get(key.run_id)) is not None:
            entry.update(result=seen.result, cached=True)
            return self._duplicate(seen.result, seen.output_json)
        entry["attempt_id"] = attempt_id = self._new_attempt_id()

        try:
            claim = self._ledger.claim(key, attempt_id)
        except RunAlreadyCompleted as done:
            entry["result"] = done.result
            self._cache.remember(key.run_id, done.result, done.output_json, done.error, done.seconds_left)
            return self._duplicate(done.result, done.output_json)
        except RunInProgress as busy:
            entry.update(holder_attempt_id=busy.holder, retry_after_s=busy.retry_after_seconds)
            retry_after = {"Retry-After": str(busy.retry_after_seconds)}
            return Answer(Outcome.IN_PROGRESS, "another attempt holds the run's lease", retry_after)
        except ClaimTooLate as late:
            entry["error"] = str(late)
            return Answer(Outcome.STORE_ERROR, "Firestore answered the claim too late: job not started")
        except google_exceptions.GoogleAPIError as error:
            entry["error"] = repr(error)
            return Answer(Outcome.STORE_ERROR, "could not claim the run: Firestore failed")
        entry.update(fence=claim.fence, claim=claim.kind.value)

        policy = self._overlap.get(key.job_name, OverlapPolicy.ALLOW)
        if policy is OverlapPolicy.ALLOW:
            return self._run_and_finish(key, claim, body, entry)
        entry["overlap"] = policy.value
        return self._run_alone(key, claim, body, entry, policy)

    def _duplicate(self, result: str, output_json: str | None) -> Answer:
        outcome = _DUPLICATE_OUTCOME.get(result, Outcome.DUPLICATE_COMPLETED)
        if outcome is Outcome.OVERLAP_SKIPPED:
            return Answer(outcome, "skipped: another run of the job was running (overlap policy skip)")
        return Answer(outcome, "duplicate of a completed run: job not run", output_json=output_json)

    def _run_alone(
        self, key: RunKey, claim: Claim, body: bytes, entry: dict[str, Any], policy: OverlapPolicy
    ) -> Answer:
        """Take the job's lock, or skip / wait as the policy says; release it afterwards."""
        assert self._locks is not None
        lock: JobLock | None = None
        try:
            try:
                lock = self._locks.acquire(key, claim)
            except JobBusy as busy:
                entry["holder_run_id"] = busy.holder_run_id
                return self._overlapped(claim, busy, policy, entry)
            return self._run_and_finish(key, claim, body, entry)
        except (google_exceptions.GoogleAPIError, LeaseLost) as error:
            entry["error"] = repr(error)
            with contextlib.suppress(google_exceptions.GoogleAPIError, LeaseLost):
                self._ledger.release(claim)
            return Answer(Outcome.STORE_ERROR, "could not take or settle the job's lock: Firestore failed")
        finally:
            if lock is not None:
                with contextlib.suppress(google_exceptions.GoogleAPIError):
                    self._locks.release(lock)  # else it expires with the lease

    def _overlapped(
        self, claim: Claim, busy: JobBusy, policy: OverlapPolicy, entry: dict[str, Any]
    ) -> Answer:
        if policy is OverlapPolicy.SKIP:
            self._ledger.complete(claim, JobResult.OVERLAP_SKIPPED, f"run {busy.holder_run_id} was running")
            entry["result"] = JobResult.OVERLAP_SKIPPED.value
            self._remember(claim, JobResult.OVERLAP_SKIPPED, None, None)
            return self._duplicate(JobResult.OVERLAP_SKIPPED.value, None)
        self._ledger.release(claim)  # nothing ran: the next delivery claims afresh
        entry["retry_after_s"] = busy.retry_after_seconds
        return Answer(
            Outcome.OVERLAP_WAIT,
            "another run of the job is running (overlap policy wait): retry later",
            {"Retry-After": str(busy.retry_after_seconds)},
        )

    def _run_and_finish(self, key: RunKey, claim: Claim, body: bytes, entry: dict[str, Any]) -> Answer:
        context = RunContext(
            run_id=claim.run_id,
            job_name=key.job_name,
            schedule_time=key.schedule_time,
            project=key.project,
            location=key.location,
            attempt_id=claim.attempt_id,
            fence=claim.fence,
            body=body,
        )
        try:
            try:
                output_json = encode_output(self._job(context))
            except TerminalJobError as error:
                entry["error"] = str(error)
                self._ledger.complete(claim, JobResult.TERMINAL_FAILURE, str(error))
                self._remember(claim, JobResult.TERMINAL_FAILURE, None, str(error))
                return Answer(Outcome.FAILED_TERMINAL, "job failed terminally: recorded, will not be retried")
            except Exception as error:
                entry.update(error=repr(error), traceback=traceback.format_exc())
                self._ledger.release(claim)
                return Answer(Outcome.FAILED_RELEASED, "job failed: claim released for the next retry")
            self._ledger.complete(claim, output_json=output_json)
        except LeaseLost:
            return Answer(
                Outcome.LEASE_LOST,
                "lease expired during the job and another attempt took the run over: "
                "the lease is shorter than the job takes",
            )
        except google_exceptions.GoogleAPIError as error:
            entry["error"] = repr(error)
            return Answer(Outcome.STORE_ERROR, "could not record the run's end: Firestore failed")
        self._remember(claim, JobResult.SUCCEEDED, output_json, None)
        if claim.kind is ClaimKind.TOOK_OVER_LEASE:
            return Answer(
                Outcome.LEASE_TAKEN_OVER,
                "took over an expired lease and ran the job",
                output_json=output_json,
            )
        return Answer(Outcome.EXECUTED, "job ran", output_json=output_json)

    def _remember(self, claim: Claim, result: JobResult, output_json: str | None, error: str | None) -> None:
        """The record expires retention after the claim's commit, which was at most a lease ago."""
        valid_for = (self._ledger.retention - self._ledger.lease).total_seconds()
        self._cache.remember(claim.run_id, result.value, output_json, error, valid_for)


def unavailable_reply(error: Exception, log_stream: TextIO | None = None) -> Reply:
    """The answer when the handler cannot be built (no credentials, a broken client) or the
    request cannot be read: the same JSON shape and log line as any other failure, never the
    framework's HTML page."""
    status, severity = _STATUS_AND_SEVERITY[Outcome.INTERNAL_ERROR]
    message = "the function could not handle the request"
    fields = {log_fields.OUTCOME: Outcome.INTERNAL_ERROR.value, "error": repr(error)}
    fields["traceback"] = traceback.format_exc()
    structured_log.emit(severity, f"{Outcome.INTERNAL_ERROR.value}: {message}", fields, log_stream)
    return Reply(status, {"outcome": Outcome.INTERNAL_ERROR.value, "message": message})
