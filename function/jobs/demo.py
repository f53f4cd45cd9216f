"""The demo job: records every execution, so exactly-once can be counted, not assumed.

Body (JSON, all optional): {"sleep_seconds": <float>, "fail": <bool>} to produce slow and
failing runs on purpose. Any other field, or a sleep longer than a function may run, is a
terminal failure: a typo must not run the job with defaults. The execution record is
written after the sleep and only when the job succeeds, so a crashed or failed attempt
leaves none behind.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from exactly_once import RunContext, TerminalJobError, firestore_client

EXECUTIONS_COLLECTION = "job_executions"
BODY_FIELDS = ("sleep_seconds", "fail")
# Cloud Run functions answering HTTP stop after at most an hour.
MAX_SLEEP_SECONDS = 3600.0


class DemoJobFailure(RuntimeError):
    """The failure the body asked for; retryable like any unexpected error."""


def demo_parameters(body: Mapping[str, Any]) -> tuple[float, bool]:
    """(sleep_seconds, fail) from the body, or a TerminalJobError naming the field. The range
    is checked by comparison alone, which holds for NaN, infinities and integers of any size
    (float() of a 400-digit integer raises OverflowError)."""
    sleep_seconds = body.get("sleep_seconds", 0)
    fail = body.get("fail", False)
    if isinstance(sleep_seconds, bool) or not isinstance(sleep_seconds, int | float):
        raise TerminalJobError("body field sleep_seconds must be a number")
    if not 0 <= sleep_seconds <= MAX_SLEEP_SECONDS:
        raise TerminalJobError(f"body field sleep_seconds must be a number from 0 to {MAX_SLEEP_SECONDS:g}")
    if not isinstance(fail, bool):
        raise TerminalJobError("body field fail must be true or false")
    return sleep_seconds, fail


def run_demo_job(context: RunContext) -> dict[str, float]:
    sleep_seconds, fail = demo_parameters(context.json_body(allowed_fields=BODY_FIELDS))
    started_at = datetime.now(UTC)
    time.sleep(sleep_seconds)
    if fail:
        raise DemoJobFailure("the request body asked this run to fail")
    firestore_client().collection(EXECUTIONS_COLLECTION).document(context.attempt_id).set(
        {
            "run_id": context.run_id,
            "attempt_id": context.attempt_id,
            "fence": context.fence,
            "job_name": context.job_name,
            "schedule_time": context.schedule_time,
            "started_at": started_at,
            "finished_at": datetime.now(UTC),
        }
    )
    return {"slept_seconds": sleep_seconds}
