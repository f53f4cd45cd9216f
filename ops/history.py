"""`history`: a job's latest runs as the ledger and the audit see them, one line (or one JSON
object) each, for an operator asking "what happened to this job lately?" and for the stack's
page (ops/page.py). Built on `status`'s reading of the ledger (ops/ledger_view.py): the runs
the schedule expects, read by id and judged as the audit judges them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from exactly_once.audit.config import AuditedJob
from exactly_once.audit.missed_runs import ExpectedRun
from exactly_once.audit.schedule import fires
from exactly_once.delivery.scheduler_request import Trigger, format_rfc3339
from exactly_once.ledger.fields import SCHEDULE_TIME
from infra.settings.jobs import JobSettings
from ops.context import StackContext, UserError, utc_now
from ops.exit_codes import ExitCode
from ops.ledger_view import (
    catchup_deliveries,
    job_heading,
    judge_expected,
    manual_in,
    run_timing,
    stack_target_until,
)
from ops.run_now import describe

# How many of the latest runs `history` shows by default.
HISTORY_RUNS = 20


@dataclass(frozen=True)
class JobHistory:
    """One job's latest runs: `runs` scheduled, newest first, and `manual` runs (run-now, a
    force-run) claimed in the same span, newest first; each a JSON-ready dict."""

    settings: JobSettings
    audited: AuditedJob
    until: datetime
    runs: list[dict[str, Any]]
    manual: list[dict[str, Any]]

    def as_json(self, stack: str) -> dict[str, Any]:
        return {
            "stack": stack,
            "job": self.settings.name,
            "run_key": self.audited.name,
            "schedule": self.audited.schedule,
            "time_zone": self.audited.time_zone,
            "until": format_rfc3339(self.until),
            "runs": self.runs,
            "manual_runs": self.manual,
        }


def job_histories(
    context: StackContext,
    jobs: Sequence[str],
    *,
    last: int,
    until: datetime | None = None,
    now: datetime | None = None,
) -> list[JobHistory]:
    """Each of `jobs`' latest `last` scheduled runs up to `until` (within the retention), judged
    at `now`, and its latest `last` manual runs. What the stack's audit runs say (the target the
    stack records, the runs catch-up delivered) is read once for all of them."""
    if last < 1:
        raise UserError(f"--last: expected a positive number of runs, got {last}")
    now = now or utc_now()
    until = until or now
    since = until - timedelta(seconds=context.settings.retention_seconds)
    target = stack_target_until(context, until)
    caught_up = catchup_deliveries(context, since, until)
    found = []
    for job in jobs:
        settings = context.job(job)
        audited = context.audited(settings)
        latest = fires(audited.schedule, audited.time_zone, since, until, newest=last)
        judged = judge_expected(context, [(audited, fire) for fire in latest], now, target)
        runs = [_history_entry(run, audited.time_zone, caught_up.get(run.run_id)) for run in reversed(judged)]
        manual = [
            _manual_entry(record) for record in reversed(manual_in(context, settings, since, until)[-last:])
        ]
        found.append(JobHistory(settings, audited, until, runs, manual))
    return found


def job_history(
    context: StackContext, job: str, *, last: int, until: datetime | None = None, now: datetime | None = None
) -> JobHistory:
    """job_histories of one job."""
    return job_histories(context, [job], last=last, until=until, now=now)[0]


def history(
    context: StackContext,
    out: TextIO,
    *,
    job: str,
    last: int = HISTORY_RUNS,
    until: datetime | None = None,
    now: datetime | None = None,
    as_json: bool = False,
) -> ExitCode:
    """`ops history`: the job's history as text lines, or one JSON document."""
    found = job_history(context, job, last=last, until=until, now=now)
    if as_json:
        out.write(json.dumps(found.as_json(context.stack), indent=2) + "\n")
        return ExitCode.OK
    out.write(job_heading(found.settings) + "\n")
    if not found.runs:
        out.write("  no scheduled runs in the retention window\n")
    for entry in [*found.runs, *found.manual]:
        out.write("  " + _history_line(entry) + "\n")
    return ExitCode.OK


def _history_entry(run: ExpectedRun, time_zone: str, caught_up: str | None) -> dict[str, Any]:
    """One scheduled run as `history` reports it (JSON-ready); `caught_up`: how catch-up
    delivered it again, if it did."""
    record = run.fields
    return {
        "run_id": run.run_id,
        "schedule_time": format_rfc3339(run.schedule_time),
        "schedule_time_local": run.schedule_time.astimezone(ZoneInfo(time_zone)).isoformat(),
        "outcome": run.state.value,
        "detail": run.detail or None,
        "trigger": Trigger.SCHEDULED.value,
        "attempt_id": record.get("attempt_id"),
        "result": record.get("result"),
        **run_timing(record),
        "caught_up": caught_up,
    }


def _manual_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """A manual run (`run-now`, a force-run) as `history` reports it: it follows no schedule,
    so its time is its claim's."""
    announced = record.get(SCHEDULE_TIME)
    return {
        "run_id": None,
        "schedule_time": format_rfc3339(announced) if isinstance(announced, datetime) else None,
        "outcome": "manual",
        "detail": describe(record),
        "trigger": Trigger.FORCED.value,
        "attempt_id": record.get("attempt_id"),
        "result": record.get("result"),
        **run_timing(record),
        "caught_up": None,
    }


def _history_line(entry: Mapping[str, Any]) -> str:
    if entry["trigger"] == Trigger.FORCED.value:
        parts = [f"{entry['claimed_at']}  manual run  ({entry['detail']})"]
    else:
        parts = [f"{entry['schedule_time']}  {entry['schedule_time_local']}  {entry['outcome']}"]
        if entry["detail"]:
            parts.append(f"({entry['detail']})")
        if entry["attempt_id"]:
            parts.append(f"attempt={entry['attempt_id']}")
    if entry["duration_seconds"] is not None:
        parts.append(f"duration={entry['duration_seconds']:.3f}s")
    if entry.get("caught_up"):
        parts.append(f"catch-up: {entry['caught_up']}")
    return "  ".join(parts)
