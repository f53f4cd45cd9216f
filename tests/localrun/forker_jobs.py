"""Jobs a forker might write on a first try, each wrong in its own way: the demo must tell
each apart from a success. Copied into a fork's function/jobs/ by the tests that serve them."""

from __future__ import annotations

from datetime import UTC, datetime

from exactly_once import RunContext


def returns_a_datetime(context: RunContext) -> dict[str, datetime]:
    """Runs to its end, but its return value is not JSON: the run fails terminally."""
    return {"finished_at": datetime.now(UTC)}


def raises_value_error(context: RunContext) -> None:
    """Fails on every attempt with an unexpected error: each releases its claim for a retry."""
    raise ValueError(f"no report for {context.schedule_time:%Y-%m-%d}")
