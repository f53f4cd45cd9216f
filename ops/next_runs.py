"""`next`: a job's next fire times, in its zone and in UTC, as the audit will expect them.

Cloud Scheduler shows no next fire time, and reading a unix-cron expression in a zone with
daylight saving is where people get a schedule wrong: a `30 2 * * *` job in Europe/Berlin has
no run on the last Sunday of March, and one run with two possible instants on the last Sunday
of October. So the times come from the audit's own walk (`exactly_once.audit.schedule`), never
from a second reading of the cron expression, and each change of the zone's offset is marked
on the first run after it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from exactly_once.audit.config import AuditError
from exactly_once.audit.schedule import FireTime, checked_schedule, following_fires
from exactly_once.run_key import format_rfc3339
from ops.context import StackContext, UserError
from ops.exit_codes import ExitCode
from ops.ledger_view import job_heading

# How many fire times `next` lists by default.
NEXT_RUNS = 10
# The most it lists: a year of an every-minute job is half a million.
MAX_NEXT_RUNS = 10_000


@dataclass(frozen=True)
class NextRun:
    """One expected run. `offset_changed_from`: the zone's UTC offset before this run, when it
    differs from this run's (a daylight-saving change since the previous run listed)."""

    fire: FireTime
    local: datetime
    offset_changed_from: timedelta | None

    def as_json(self) -> dict[str, Any]:
        return {
            "utc": format_rfc3339(self.fire.instant),
            "local": self.local.isoformat(),
            "utc_offset": _offset(self.local.utcoffset()),
            "offset_changed_from": _offset(self.offset_changed_from) if self.offset_changed_from else None,
            "repeated_at": format_rfc3339(self.fire.repeated) if self.fire.repeated else None,
        }

    def line(self) -> str:
        text = f"{format_rfc3339(self.fire.instant)}  {self.local.isoformat()}"
        if self.offset_changed_from is not None:
            text += (
                f"  (daylight saving: UTC offset {_offset(self.offset_changed_from)} -> "
                f"{_offset(self.local.utcoffset())} since the previous run)"
            )
        if self.fire.repeated is not None:
            text += (
                f"  (a wall time the change back repeats: Cloud Scheduler may deliver it at "
                f"{format_rfc3339(self.fire.repeated)} instead; the audit counts either as this run)"
            )
        return text


def next_runs(schedule: str, time_zone: str, after: datetime, count: int) -> list[NextRun]:
    """The first `count` runs of the schedule strictly after `after`."""
    try:
        zone = checked_schedule(schedule, time_zone)
        fires = following_fires(schedule, zone, after)
        listed: list[NextRun] = []
        previous = after.astimezone(zone).utcoffset()
        while len(listed) < count:
            fire = next(fires)
            local = fire.instant.astimezone(zone)
            offset = local.utcoffset()
            listed.append(NextRun(fire, local, previous if previous != offset else None))
            previous = offset
    except AuditError as error:
        raise UserError(str(error)) from None
    return listed


def show_next(
    context: StackContext, out: TextIO, *, job: str, count: int, after: datetime, as_json: bool
) -> ExitCode:
    """The job's next `count` runs after `after`: text lines, or one JSON document."""
    if not 1 <= count <= MAX_NEXT_RUNS:
        raise UserError(f"--count: expected 1 to {MAX_NEXT_RUNS} runs, got {count}")
    settings = context.job(job)
    audited = context.audited(settings)
    runs = next_runs(audited.schedule, audited.time_zone, after, count)
    if as_json:
        document = {
            "stack": context.stack,
            "job": settings.name,
            "run_key": audited.name,
            "schedule": audited.schedule,
            "time_zone": audited.time_zone,
            "paused": settings.paused,
            "after": format_rfc3339(after),
            "runs": [run.as_json() for run in runs],
        }
        out.write(json.dumps(document, indent=2) + "\n")
        return ExitCode.OK
    out.write(job_heading(settings) + "\n")
    out.write(f"next {count} runs after {format_rfc3339(after)}: UTC, then {audited.time_zone}\n")
    for run in runs:
        out.write(run.line() + "\n")
    return ExitCode.OK


def _offset(offset: timedelta | None) -> str:
    """`+02:00`, as an RFC 3339 time writes its offset."""
    minutes = int((offset or timedelta()).total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
