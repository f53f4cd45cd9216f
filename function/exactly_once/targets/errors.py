"""One classification of downstream failures, shared by every proxy job.

The handler already treats TerminalJobError as "record and stop" and anything else as
"release and let Cloud Scheduler retry". The proxies must decide which side a downstream
failure falls on in one place, so an HTTP 503 and a gRPC UNAVAILABLE are never judged apart.

Retryable: 5xx, 408, 409, 429, timeouts, connection errors, gRPC ABORTED / UNAVAILABLE /
DEADLINE_EXCEEDED / RESOURCE_EXHAUSTED / INTERNAL / UNKNOWN / CANCELLED, auth transport errors.
409 is retryable because, for Idempotency-Key servers (IETF draft), it means "a request with
this key is still being processed"; it is also how gRPC ABORTED maps to HTTP.
Terminal: every other 4xx (bad input, not found, permission denied) and malformed bodies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import requests
from google.api_core import exceptions as google_exceptions
from google.auth import exceptions as auth_exceptions

from exactly_once.errors import RetryableJobError, TerminalJobError

# Statuses below 500 that a retry can still fix.
_RETRYABLE_4XX = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    return status >= 500 or status in _RETRYABLE_4XX


def error_for_status(status: int, what: str, detail: str = "") -> Exception:
    """The exception a non-2xx answer of `what` should raise."""
    message = f"{what} answered HTTP {status}" + (f": {detail}" if detail else "")
    if is_retryable_status(status):
        return RetryableJobError(message)
    return TerminalJobError(message)


def classify(error: BaseException, what: str) -> Exception:
    """Map a client library or transport exception to RetryableJobError / TerminalJobError."""
    if isinstance(error, TerminalJobError | RetryableJobError):
        return error
    if isinstance(error, requests.Timeout | requests.ConnectionError):
        return RetryableJobError(f"{what}: {type(error).__name__}: {error}")
    if isinstance(error, google_exceptions.RetryError):
        return RetryableJobError(f"{what}: retries exhausted: {error}")
    if isinstance(error, google_exceptions.GoogleAPICallError):
        # Unknown and Cancelled carry no HTTP code (or 499): transport trouble, retry.
        status = error.code
        if status is None or status == 499 or is_retryable_status(status):
            return RetryableJobError(f"{what}: {type(error).__name__}: {error.message}")
        return TerminalJobError(f"{what}: {type(error).__name__} ({status}): {error.message}")
    if isinstance(error, auth_exceptions.GoogleAuthError):
        # On Cloud Run credentials come from the metadata server, whose failures pass.
        return RetryableJobError(f"{what}: credentials: {type(error).__name__}: {error}")
    if isinstance(error, requests.RequestException):
        # Invalid URL, too many redirects...: retrying sends the same request again.
        return TerminalJobError(f"{what}: {type(error).__name__}: {error}")
    return RetryableJobError(f"{what}: unexpected {type(error).__name__}: {error}")


@contextmanager
def downstream_call(what: str) -> Iterator[None]:
    """Re-raise anything the block raises as a classified error, keeping the cause."""
    try:
        yield
    except Exception as error:
        classified = classify(error, what)
        if classified is error:
            raise
        raise classified from error
