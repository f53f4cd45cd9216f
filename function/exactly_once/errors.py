"""The two exceptions a job raises to say how its failure should be treated.

Any exception is a failure; these two name the decision, so a job's author never has to know
which HTTP status makes Cloud Scheduler retry:

- TerminalJobError: retrying cannot help. The run is recorded as completed with the error
  (`failed_terminal`, 200) and Cloud Scheduler stops.
- RetryableJobError (or any other exception): the claim is released and the delivery is
  answered 500 (`failed_released`), so Cloud Scheduler retries the run with the same run_id.
"""

from __future__ import annotations


class TerminalJobError(Exception):
    """The run cannot succeed by retrying (bad input, a 4xx from downstream)."""


class RetryableJobError(Exception):
    """The run may succeed later (a 5xx or a timeout downstream): retry it."""


# What a run record stores and a log line carries of an error. Firestore documents hold at
# most 1 MiB and Cloud Logging entries 256 KiB: an error is a sentence, not a payload.
MAX_ERROR_BYTES = 4096
_TRUNCATED = " … [truncated]"


def error_text(error: BaseException | str, limit: int = MAX_ERROR_BYTES) -> str:
    """The error's text as it can always be stored: valid UTF-8 (a lone surrogate, which
    Firestore refuses, is escaped) and at most `limit` bytes, cut on a character boundary.
    A terminal failure whose message could not be stored would be retried at every lease
    expiry instead of being recorded once."""
    text = error if isinstance(error, str) else str(error) or type(error).__name__
    encoded = text.encode("utf-8", "backslashreplace")
    if len(encoded) <= limit:
        return encoded.decode("utf-8")
    room = limit - len(_TRUNCATED.encode())
    return encoded[:room].decode("utf-8", "ignore") + _TRUNCATED
