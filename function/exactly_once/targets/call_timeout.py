"""How long a proxy job's call to its API may take: one rule for every target.

A call is made once, with no client-side retry (the retry is Cloud Scheduler's: a new
delivery, with a new fence). Its timeout is CALL_TIMEOUT_SECONDS, cut to the time the attempt
has left less CALL_MARGIN_SECONDS. The watchdog ends the instance at the attempt's time limit
(delivery/heartbeat.py); a call it cuts off records nothing, and the run waits out its lease
before a retry looks for what the call may have started: the lost-answer window, held open
for a whole lease. A call whose own timeout ends it first fails retryably instead: the run is
released at once, and its retry finds what the call started (BigQuery by the job's id, Cloud
Run by the execution's RUN_ID) or starts it. With too little time left for a call at all, it
is not made: the run is released before anything starts.

Standard library only: the stack's timing advisory (infra/settings/timing_checks.py) reads these numbers.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Final

from exactly_once.errors import RetryableJobError

if TYPE_CHECKING:
    from exactly_once.context import RunContext

# The longest a call of the API proxies may take (the downstream HTTP proxy's default).
CALL_TIMEOUT_SECONDS: Final = 30.0
# Kept between a call's timeout and the attempt's time limit: time for the client to give up
# and the job to return, so the run is released rather than its instance ended.
CALL_MARGIN_SECONDS: Final = 1.0
# A call given less than this is not made: it could start something and not hear about it.
MIN_CALL_SECONDS: Final = 1.0


def call_timeout(
    context: RunContext,
    what: str,
    *,
    step_ends_at: float | None = None,
    longest: float = CALL_TIMEOUT_SECONDS,
) -> float:
    """The timeout of the next call, `what`: `longest` (the call timeout, unless the job's
    settings choose theirs), cut to the attempt's time left less the margin and, for a call
    that is one of several (a search page by page), to the end of their step (`step_ends_at`,
    time.monotonic()). RetryableJobError, before anything is called, when that leaves less
    than MIN_CALL_SECONDS."""
    attempt_left = context.seconds_left() - CALL_MARGIN_SECONDS
    step_left = math.inf if step_ends_at is None else step_ends_at - time.monotonic()
    timeout = min(longest, attempt_left, step_left)
    if timeout >= MIN_CALL_SECONDS:
        return timeout
    if step_left < attempt_left:
        raise RetryableJobError(
            f"{what}: not called: {max(0.0, step_left):.1f}s left of the time its step may take; "
            "the run is released for a retry"
        )
    raise RetryableJobError(
        f"{what}: not called: {context.seconds_left():.1f}s left of the attempt, less than a call's "
        f"{MIN_CALL_SECONDS:g}s and the {CALL_MARGIN_SECONDS:g}s kept before its time limit; "
        "the run is released for a retry"
    )
