"""A job knows its own day: its context carries its zone and its ScheduleTime there, so a run at
00:30 Europe/Berlin counts "yesterday" from Berlin's date, not from UTC's (still the evening
before)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from exactly_once import RunContext
from exactly_once.config import JobPolicy
from exactly_once.testing import JobEnvironment
from tests.support.doc_examples import JOB_DAY, example_source

# 00:30 in Berlin on 29 November (CET, UTC+1) is 23:30 UTC on the 28th.
HALF_PAST_MIDNIGHT = datetime(2026, 11, 28, 23, 30, tzinfo=UTC)


def yesterday(context: RunContext) -> str:
    """docs/jobs.md's example, run as written."""
    namespace: dict[str, Any] = {}
    exec(compile(example_source(JOB_DAY), JOB_DAY, "exec"), namespace)
    return str(namespace["yesterday"](context).isoformat())


def test_a_run_at_half_past_midnight_in_berlin_computes_yesterday_in_berlin() -> None:
    env = JobEnvironment(yesterday, policy=JobPolicy(time_zone="Europe/Berlin"))
    done = env.run(at=HALF_PAST_MIDNIGHT)
    assert (done.outcome, done.output) == ("executed", "2026-11-28")
    # The same instant read in UTC is a day earlier: the bug a job without its zone had.
    assert (HALF_PAST_MIDNIGHT.date() - timedelta(days=1)) == date(2026, 11, 27)


def test_a_context_says_its_zone_and_the_local_time_of_its_run() -> None:
    seen: list[RunContext] = []
    JobEnvironment(seen.append, policy=JobPolicy(time_zone="Europe/Berlin")).run(at=HALF_PAST_MIDNIGHT)
    (context,) = seen
    assert context.time_zone == "Europe/Berlin"
    assert context.local_schedule_time.isoformat() == "2026-11-29T00:30:00+01:00"
    # A job without a zone in its table (none set) reads its schedule in UTC.
    plain = RunContext("r", "j", HALF_PAST_MIDNIGHT, "p", "l", "a", 1, b"")
    assert (plain.time_zone, plain.local_schedule_time.date()) == ("UTC", date(2026, 11, 28))
