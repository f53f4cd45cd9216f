"""What job logic receives, and what it may return.

Job logic runs after the claim and before the finish, outside any transaction, so its side
effects happen at most once per successful claim. Anything it calls downstream should carry
`run_id` as an idempotency key and `fence` to reject stale writers. Failures are reported
with the exceptions of errors.py; a returned JSON value is stored as the run's output.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from exactly_once import strict_json
from exactly_once.errors import TerminalJobError


@dataclass(frozen=True)
class RunContext:
    """One run, as the job sees it. It carries no client: it describes the run and nothing
    else, so a job is tested with a plain RunContext, and a job that keeps records of its own
    asks for the instance's client (exactly_once.firestore_client) or builds its own."""

    run_id: str
    job_name: str
    schedule_time: datetime
    project: str
    location: str
    attempt_id: str
    # The claim's commit time in nanoseconds: grows with every claim of this run, so a
    # downstream store can refuse writes carrying a smaller fence than it has seen.
    fence: int
    body: bytes
    # time.monotonic() at which the attempt is ended if the job has not returned (the stack
    # sets it a little before the function timeout); None: no limit (a test's plain context).
    ends_at: float | None = None

    def seconds_left(self) -> float:
        """How long the job may still run. A long job checks it between steps and stops in
        time (raise RetryableJobError to continue in a retry, or return what it has); one that
        overruns is ended with its instance, and its run is retried once the lease ends."""
        if self.ends_at is None:
            return math.inf
        return max(0.0, self.ends_at - time.monotonic())

    def json_body(self, allowed_fields: Collection[str] | None = None) -> dict[str, Any]:
        """The body as a JSON object ({} when empty). A malformed body (strict JSON: no NaN,
        no infinite numbers, nesting bounded), or one with fields outside `allowed_fields`, is
        terminal: Cloud Scheduler sends the same bytes on every
        retry, and a typo in a field name must not be silently ignored."""
        if not self.body.strip():
            return {}
        try:
            parsed = strict_json.loads(self.body)
        except strict_json.StrictJsonError as error:
            raise TerminalJobError(f"request body is not JSON: {error}") from None
        if not isinstance(parsed, dict):
            raise TerminalJobError("request body must be a JSON object")
        if allowed_fields is not None and (unknown := sorted(set(parsed) - set(allowed_fields))):
            raise TerminalJobError(f"unknown body fields {unknown}; expected {sorted(allowed_fields)}")
        return parsed


# Returns the run's output: a JSON value (or None), stored with the completing write.
JobHandler = Callable[[RunContext], Any]

# Stored in the run record (Firestore documents hold at most 1 MiB) and sent to every
# duplicate: an output is a summary (counts, ids, a URL), not the data itself.
MAX_OUTPUT_BYTES = 64 * 1024


def encode_output(value: Any) -> str | None:
    """The job's return value as stored JSON text. A value that cannot be stored is a terminal
    failure: running the job again would return the same value."""
    if value is None:
        return None
    try:
        text = strict_json.dumps(value)
    except strict_json.StrictJsonError as error:
        raise TerminalJobError(f"the job's return value is {error}") from None
    if strict_json.nesting_depth(text) > strict_json.MAX_DEPTH:
        raise TerminalJobError(f"the job's return value nests deeper than {strict_json.MAX_DEPTH} levels")
    if (size := len(text.encode())) > MAX_OUTPUT_BYTES:
        raise TerminalJobError(
            f"the job's return value is {size} bytes of JSON, more than the {MAX_OUTPUT_BYTES} a run stores"
        )
    return text
