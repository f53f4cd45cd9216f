"""`status` and `audit`: what the ledger says about each job's scheduled runs.

Both compute the runs the schedule expects and read those records by id: no query and no
index, so they work on any database the stack deployed, exactly as the scheduled audit does.
Like the scheduled audit, they learn the target this stack's function records from the
audit's own runs, and count a run recorded by another target as missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

from exactly_once.audit.config import AuditError
from exactly_once.audit.missed_runs import (
    ExpectedRun,
    RecordReader,
    RunState,
    expected_runs,
    fire_times,
    judge_runs,
    stack_target,
)
from exactly_once.audit.reads import firestore_reader
from exactly_once.delivery.scheduler_request import RunKey, format_rfc3339
from exactly_once.targets.downstream import Downstream
from infra.settings.jobs import AUDIT_JOB_NAME
from ops.context import StackContext, UserError, utc_now
from ops.exit_codes import ExitCode

# How many of the latest runs `status` shows per job by default.
STATUS_RUNS = 5


def _reader(context: StackContext) -> RecordReader:
    return firestore_reader(context.firestore(), context.settings.runs_collection)


def _judge(
    context: StackContext, expected: Sequence[tuple[Any, datetime]], now: datetime, target: str | None
) -> list[ExpectedRun]:
    return judge_runs(
        expected,
        project=context.project,
        location=context.location,
        now=now,
        read_records=_reader(context),
        target=target,
    )


def _stack_target(context: StackContext, until: datetime) -> str | None:
    """The target recorded on the stack's latest audit runs up to `until` (within the
    retention): the function that ran them runs every job of the stack. None without the
    audit job, or when none of its runs has a record."""
    audit = next((job for job in context.settings.jobs if job.name == AUDIT_JOB_NAME), None)
    if audit is None:
        return None
    audited = context.audited(audit)
    since = until - timedelta(seconds=context.settings.retention_seconds)
    times = fire_times(audited.schedule, audited.time_zone, since, until)
    ids = [RunKey(context.project, context.location, audited.name, t).run_id for t in reversed(times)]
    return stack_target(_reader(context), ids)


def _target_note(target: str | None) -> str:
    if target is None:
        return (
            "note: no run of the stack's missed-run audit is recorded, so runs recorded by another "
            "function sharing the runs collection are not told apart"
        )
    return f"this stack's function records target {target}: runs recorded by another target are missed"


def _retention_note(context: StackContext, since: datetime, now: datetime) -> str:
    """Run records expire (the TTL), so the ledger can only vouch for recent runs."""
    retention = int(context.settings.retention_seconds)
    oldest = now - timedelta(seconds=retention)
    note = (
        f"note: run records are deleted by the TTL {retention}s after they are claimed, so the audit "
        f"is only sure of runs scheduled after {format_rfc3339(oldest)}"
    )
    if since < oldest:
        note += ": an earlier run can lack a record because the TTL removed it"
    return note


def audit(
    context: StackContext,
    out: TextIO,
    *,
    job: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
) -> ExitCode:
    """One line per expected run in [since, until]; OK when none is missed and no run's
    downstream work failed, else RUN_PROBLEM."""
    now = now or utc_now()
    until = until or now
    since = since or until - timedelta(seconds=context.settings.retention_seconds)
    audited = [context.audited(settings) for settings in context.jobs(job)]
    try:
        expected = expected_runs(audited, since=since, until=until)
    except AuditError as error:
        raise UserError(str(error)) from None
    out.write(
        f"audit of stack {context.stack} ({context.project}/{context.location}, database "
        f"{context.database}, collection {context.settings.runs_collection}) "
        f"from {format_rfc3339(since)} to {format_rfc3339(until)}\n"
    )
    out.write(_retention_note(context, since, now) + "\n")
    target = _stack_target(context, until)
    out.write(_target_note(target) + "\n")
    runs = _judge(context, expected, now, target)
    for run in runs:
        detail = f"  ({run.detail})" if run.detail else ""
        out.write(f"{format_rfc3339(run.schedule_time)}  {run.job}  {run.state.value}{detail}\n")
    missed = [run for run in runs if run.state is RunState.MISSED]
    failed_downstream = [run for run in runs if run.state is RunState.DOWNSTREAM_FAILED]
    summary = f"{len(runs)} expected runs, {len(missed)} missed"
    if failed_downstream:
        summary += f", {len(failed_downstream)} whose downstream work failed"
    out.write(summary + "\n")
    return ExitCode.RUN_PROBLEM if missed or failed_downstream else ExitCode.OK


def status(
    context: StackContext,
    out: TextIO,
    *,
    job: str | None = None,
    limit: int = STATUS_RUNS,
    until: datetime | None = None,
    now: datetime | None = None,
) -> ExitCode:
    """The latest `limit` scheduled runs of each job up to `until`, as the ledger records them."""
    if limit < 1:
        raise UserError(f"--limit: expected a positive number of runs, got {limit}")
    now = now or utc_now()
    until = until or now
    since = until - timedelta(seconds=context.settings.retention_seconds)
    target = _stack_target(context, until)
    for settings in context.jobs(job):
        audited = context.audited(settings)
        out.write(f"job {settings.name}  (schedule {settings.schedule!r} in {settings.time_zone})\n")
        latest = fire_times(audited.schedule, audited.time_zone, since, until)[-limit:]
        runs = _judge(context, [(audited, instant) for instant in latest], now, target)
        if not runs:
            out.write("  no scheduled runs in the retention window\n")
        for run in reversed(runs):
            out.write("  " + _status_line(run) + "\n")
    return ExitCode.OK


def _status_line(run: ExpectedRun) -> str:
    record = run.record or {}
    parts = [format_rfc3339(run.schedule_time), f"status={record.get('status') or 'none'}"]
    if record.get("result"):
        parts.append(f"result={record['result']}")
    if record.get("attempt_id"):
        parts.append(f"attempt={record['attempt_id']}")
    if run.other_target is not None:
        parts.append(f"target={run.other_target}")
    claimed, completed = record.get("claimed_at"), record.get("completed_at")
    if isinstance(claimed, datetime):
        parts.append(f"claimed={format_rfc3339(claimed)}")
        if isinstance(completed, datetime):
            parts.append(f"duration={(completed - claimed).total_seconds():.3f}s")
    if record.get("error"):
        parts.append(f"error={record['error']!r}")
    if (downstream := Downstream.from_record(record)) is not None:
        parts.append(f"{downstream.kind}={downstream.name}")
        parts.append(f"downstream={downstream.state.value}")
        if downstream.error:
            parts.append(f"downstream_error={downstream.error!r}")
    parts.append(f"-> {run.state.value}")
    return "  ".join(parts)
