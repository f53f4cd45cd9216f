"""What a delivery can come to, and how each outcome is answered and logged.

Cloud Scheduler retries any non-2xx answer of an HTTP target, so the status decides what
happens next: 409 keeps it retrying while another attempt might still fail; 500 after a
release lets the retry run at once; a terminal failure answers 200 because retrying cannot
help. The function's own failures are 500, never 503: Cloud Run itself answers 503 when no
instance could take a request, and the two must stay apart in request metrics.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO

from exactly_once import log_fields, structured_log
from exactly_once.errors import error_text


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
    # Delivered more than the job's startingDeadlineSeconds after its ScheduleTime: recorded
    # skipped, never run, and not retried (a later retry is later still).
    SKIPPED_LATE = "skipped_late"
    # The job is paused after its pauseAfterFailures failed runs in a row: recorded skipped,
    # never run, and not retried (delivery/failure_pause.py).
    SKIPPED_PAUSED = "skipped_paused"
    WRONG_TARGET = "wrong_target"
    # The serving job table does not name the job: the old Scheduler job of a renamed one still
    # firing while `pulumi up` runs, or a new one firing before the function's table names it.
    # Refused unclaimed (nothing recorded) and retried by Cloud Scheduler; never run by a fallback.
    UNKNOWN_JOB = "unknown_job"
    BAD_REQUEST = "bad_request"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    BODY_TOO_LARGE = "body_too_large"
    STORE_ERROR = "store_error"
    INTERNAL_ERROR = "internal_error"


# HTTP status and log severity per outcome.
STATUS_AND_SEVERITY: dict[Outcome, tuple[int, str]] = {
    Outcome.EXECUTED: (200, "INFO"),
    Outcome.DUPLICATE_COMPLETED: (200, "INFO"),
    Outcome.IN_PROGRESS: (409, "INFO"),
    Outcome.LEASE_TAKEN_OVER: (200, "WARNING"),
    Outcome.LEASE_LOST: (409, "ERROR"),
    Outcome.FAILED_RELEASED: (500, "ERROR"),
    Outcome.FAILED_TERMINAL: (200, "ERROR"),
    Outcome.OVERLAP_SKIPPED: (200, "INFO"),
    Outcome.OVERLAP_WAIT: (409, "INFO"),
    Outcome.SKIPPED_LATE: (200, "WARNING"),
    Outcome.SKIPPED_PAUSED: (200, "WARNING"),
    Outcome.WRONG_TARGET: (409, "ERROR"),
    Outcome.UNKNOWN_JOB: (404, "WARNING"),
    Outcome.BAD_REQUEST: (400, "WARNING"),
    Outcome.METHOD_NOT_ALLOWED: (405, "WARNING"),
    Outcome.BODY_TOO_LARGE: (413, "WARNING"),
    Outcome.STORE_ERROR: (500, "ERROR"),
    Outcome.INTERNAL_ERROR: (500, "ERROR"),
}

# Answers that carry the run's stored output.
WITH_OUTPUT = frozenset({Outcome.EXECUTED, Outcome.LEASE_TAKEN_OVER, Outcome.DUPLICATE_COMPLETED})
# Fields of the log line that the answer repeats.
ANSWERED_FIELDS = ("run_id", "trigger", "attempt_id", "fence", "result", "body_mismatch")


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
    # The recorded reason of a terminal failure: answered to the attempt that failed and to its
    # duplicates, so whoever reads the answer learns why without the logs.
    error: str | None = None


def unavailable_reply(error: Exception, log_stream: TextIO | None = None) -> Reply:
    """The answer when the handler cannot be built (no credentials, a broken client): the
    same JSON shape and log line as any other failure, never the framework's HTML page."""
    status, severity = STATUS_AND_SEVERITY[Outcome.INTERNAL_ERROR]
    message = "the function could not handle the request"
    fields = {
        log_fields.OUTCOME: Outcome.INTERNAL_ERROR.value,
        "error": error_text(repr(error)),
        "traceback": error_text(traceback.format_exc()),
    }
    structured_log.emit(severity, f"{Outcome.INTERNAL_ERROR.value}: {message}", fields, log_stream)
    return Reply(status, {"outcome": Outcome.INTERNAL_ERROR.value, "message": message})
