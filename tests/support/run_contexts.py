"""A RunContext as the function builds one, for tests that call a job or a helper directly."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from exactly_once import RunContext

SCHEDULE_TIME = datetime(2026, 10, 16, 12, tzinfo=UTC)


def run_context(
    body: bytes = b"",
    *,
    seconds_left: float | None = None,
    run_id: str = "r",
    job_name: str = "nightly",
    attempt_id: str = "a",
) -> RunContext:
    """`seconds_left`: how long the attempt may still run (None: no time limit)."""
    return RunContext(
        run_id=run_id,
        job_name=job_name,
        schedule_time=SCHEDULE_TIME,
        project="acme",
        location="europe-west1",
        attempt_id=attempt_id,
        fence=1,
        body=body,
        ends_at=None if seconds_left is None else time.monotonic() + seconds_left,
    )
