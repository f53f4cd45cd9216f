"""`status` and `audit`: what the ledger says about each job's scheduled runs.

Both compute the runs the schedule expects and read those records by id: no query and no
index, so they work on any database the stack deployed, exactly as the scheduled audit does.
Manual runs (`run-now`, a force-run) follow no schedule: they are found by an equality on the
job name (ops/run_now.py), which Firestore's automatic single-field index serves.
Like the scheduled audit, they learn the target this stack's function records from the
audit's own runs, and count a run recorded by another target as missed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO, cast

from google.cloud.firestore import DocumentReference

from exactly_once.audit.config import AuditError
from exactly_once.audit.missed_runs import (
    ExpectedRun,
    RecordReader,
    expected_runs,
    judge_runs,
    stack_target,
)
from exactly_once.audit.schedule import FireTime, fires
from exactly_once.delivery.scheduler_request import RunKey, Trigger, format_rfc3339, parse_rfc3339
from exactly_once.ledger import lifecycle
from exactly_once.ledger.downstream import Downstream
from exactly_once.ledger.fields import (
    CONSECUTIVE_FAILURES,
    ENDED_AT,
    LAST_FAILURE,
    LAST_SUCCESS,
    REASON,
    SCHEDULE_TIME,
    TRIGGER,
    job_status_collection,
    job_status_id,
)
from exactly_once.ledger.lifecycle import StoredRecord, Verdict
from exactly_once.ledger.lifecycle.job_state import JobStatus
from infra.plan.audit_job import audit_interval_seconds
from infra.settings.jobs import AUDIT_JOB_NAME, JobSettings
from ops.context import StackContext, UserError, utc_now
from ops.exit_codes import ExitCode
from ops.resume import failure_pause_note
from ops.run_now import describe, is_manual, manual_runs

# How many of the latest runs `status` shows per job by default.
STATUS_RUNS = 5


def _reader(context: StackContext) -> RecordReader:
    # Whole records: `status` shows their times, results and outputs, not the verdict alone.
    return context.run_records(field_paths=None)


def judge_expected(
    context: StackContext, expected: Sequence[tuple[Any, FireTime]], now: datetime, target: str | None
) -> list[ExpectedRun]:
    return judge_runs(
        expected,
        project=context.project,
        location=context.location,
        now=now,
        read_records=_reader(context),
        lease=timedelta(seconds=context.settings.lease_seconds),
        target=target,
    )


def _audit_run_ids(context: StackContext, since: datetime, until: datetime) -> list[str]:
    """The ids of the stack's audit runs scheduled in [since, until], newest first."""
    audit = next((job for job in context.settings.jobs if job.name == AUDIT_JOB_NAME), None)
    if audit is None:
        return []
    audited = context.audited(audit)
    times = [fire.instant for fire in fires(audited.schedule, audited.time_zone, since, until)]
    return [RunKey(context.project, context.location, audited.name, t).run_id for t in reversed(times)]


def stack_target_until(context: StackContext, until: datetime) -> str | None:
    """The target recorded on the stack's latest audit runs up to `until` (within the
    retention): the function that ran them runs every job of the stack. None without the
    audit job, or when none of its runs has a record."""
    since = until - timedelta(seconds=context.settings.retention_seconds)
    return stack_target(_reader(context), _audit_run_ids(context, since, until))


def catchup_deliveries(context: StackContext, since: datetime, until: datetime) -> dict[str, str]:
    """Run id -> one line about its catch-up delivery, for the runs in [since, until] that the
    stack's audit delivered again: each audit run lists them in its output (exactly_once/audit/run.py).
    The audits that can have delivered them ran up to a retention after `until`."""
    later = until + timedelta(
        seconds=max(context.settings.retention_seconds, audit_interval_seconds(context.settings))
    )
    ids = _audit_run_ids(context, since, min(later, utc_now()))
    records = _reader(context)(ids) if ids else {}
    found: dict[str, str] = {}
    for stored in records.values():
        record = stored.fields
        for entry in _caught_up(record):
            run_time = parse_rfc3339(entry["schedule_time"])
            if since <= run_time <= until:
                audit_time = record.get("schedule_time")
                when = format_rfc3339(audit_time) if isinstance(audit_time, datetime) else "?"
                found.setdefault(
                    entry["run_id"], f"delivered again by the audit of {when} ({entry.get('via')})"
                )
    return found


def _caught_up(record: Mapping[str, Any]) -> list[dict[str, str]]:
    """The catch-up deliveries an audit run's output lists; none for an output of another shape."""
    try:
        output = json.loads(record.get("output_json") or "null")
    except ValueError:
        return []
    entries = output.get("caught_up") if isinstance(output, dict) else None
    return [
        entry
        for entry in entries or []
        if isinstance(entry, dict)
        and isinstance(entry.get("run_id"), str)
        and isinstance(entry.get("schedule_time"), str)
    ]


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
    target = stack_target_until(context, until)
    out.write(_target_note(target) + "\n")
    runs = judge_expected(context, expected, now, target)
    caught_up = catchup_deliveries(context, since, until)
    for run in runs:
        detail = f"  ({run.detail})" if run.detail else ""
        out.write(f"{format_rfc3339(run.schedule_time)}  {run.job}  {run.state.value}{detail}\n")
        if run.run_id in caught_up:
            out.write(f"{format_rfc3339(run.schedule_time)}  {run.job}  catch-up: {caught_up[run.run_id]}\n")
    for settings in context.jobs(job):
        for record in manual_in(context, settings, since, until):
            claimed = format_rfc3339(record["claimed_at"])
            out.write(f"{claimed}  {record.get('job_name')}  manual  ({describe(record)})\n")
    missed = [run for run in runs if run.state is Verdict.MISSED]
    paused = [run for run in runs if run.state is Verdict.PAUSED]
    skipped_late = [run for run in runs if run.state is Verdict.SKIPPED_LATE]
    failed_downstream = [run for run in runs if run.state is Verdict.DOWNSTREAM_FAILED]
    recovered = sum(run.run_id in caught_up for run in runs)
    summary = (
        f"{len(runs)} expected runs, {len(missed)} missed, {len(paused)} paused, {recovered} delivered again"
        f", {len(skipped_late)} skipped late"
    )
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
    """Each job's last result (success, failure, failures since), then its latest `limit`
    scheduled runs up to `until`, as the ledger records them."""
    if limit < 1:
        raise UserError(f"--limit: expected a positive number of runs, got {limit}")
    now = now or utc_now()
    until = until or now
    since = until - timedelta(seconds=context.settings.retention_seconds)
    target = stack_target_until(context, until)
    for settings in context.jobs(job):
        audited = context.audited(settings)
        out.write(job_heading(settings) + "\n")
        out.write(job_status_line(context, audited.name, settings) + "\n")
        latest = fires(audited.schedule, audited.time_zone, since, until, newest=limit)
        runs = judge_expected(context, [(audited, fire) for fire in latest], now, target)
        if not runs:
            out.write("  no scheduled runs in the retention window\n")
        for run in reversed(runs):
            out.write("  " + _status_line(run, timedelta(seconds=context.settings.lease_seconds)) + "\n")
        for record in reversed(manual_in(context, settings, since, until)[-limit:]):
            out.write(f"  manual run claimed {format_rfc3339(record['claimed_at'])}: {describe(record)}\n")
    return ExitCode.OK


def job_status_line(context: StackContext, job_id: str, job: JobSettings) -> str:
    """The job's last result, as the function keeps it with every run's ending commit, and
    whether failed runs paused it (a job with pauseAfterFailures)."""
    collection = context.firestore().collection(job_status_collection(context.settings.runs_collection))
    reference = cast(
        DocumentReference, collection.document(job_status_id(context.project, context.location, job_id))
    )
    document = reference.get()
    recorded = (document.to_dict() or {}) if document.exists else {}
    success, failure = recorded.get(LAST_SUCCESS), recorded.get(LAST_FAILURE)
    parts = ["last success " + (_last_run(success) if isinstance(success, dict) else "none recorded")]
    if isinstance(failure, dict):
        parts.append(f"last failure {_last_run(failure)}: {failure.get(REASON)!r}")
    else:
        parts.append("last failure none recorded")
    parts.append(f"consecutive failures {recorded.get(CONSECUTIVE_FAILURES, 0)}")
    if job.pause_after_failures is not None:
        status = (
            JobStatus.of(StoredRecord(recorded, document.update_time, document.read_time))
            if document.exists
            else JobStatus()
        )
        parts.append(failure_pause_note(status, job.pause_after_failures, job.name))
    return "; ".join(parts)


def _last_run(run: dict[str, Any]) -> str:
    """`<schedule time> (forced) ended <commit time>`, as far as the map says."""
    schedule = run.get(SCHEDULE_TIME)
    text = format_rfc3339(schedule) if isinstance(schedule, datetime) else "?"
    if run.get(TRIGGER) == Trigger.FORCED:
        text += " (forced)"
    if isinstance(ended := run.get(ENDED_AT), datetime):
        text += f" ended {format_rfc3339(ended)}"
    return text


def manual_in(
    context: StackContext, job: JobSettings, since: datetime, until: datetime
) -> list[dict[str, Any]]:
    """The job's manual runs (`run-now`, a force-run) claimed in [since, until]. Only those:
    `manual_runs` also offers, where there is none, the scheduled runs a RunJob near a
    scheduled time may have come to (what `run-now` waits for), which are listed here already.
    `until` is to the second (the CLI's times are): a claim within that second is in."""
    records = manual_runs(context, context.settings.scheduler_job_id(job), since)
    before = until + timedelta(seconds=1)
    return [record for record in records if is_manual(record) and record["claimed_at"] < before]


def job_heading(job: JobSettings) -> str:
    return f"job {job.name}  (schedule {job.schedule!r} in {job.time_zone}){_pause_note(job)}"


def _pause_note(job: JobSettings) -> str:
    if not job.paused:
        return ""
    return "  PAUSED (paused: true: Cloud Scheduler delivers none of its runs until the config resumes it)"


def _status_line(run: ExpectedRun, lease: timedelta) -> str:
    record = run.fields
    state = lifecycle.state_of(run.record, lease)
    parts = [format_rfc3339(run.schedule_time), f"status={state.value}"]
    if record.get("result"):
        parts.append(f"result={record['result']}")
    if record.get("attempt_id"):
        parts.append(f"attempt={record['attempt_id']}")
    if run.other_target is not None:
        parts.append(f"target={run.other_target}")
    timing = run_timing(record)
    if timing["claimed_at"] is not None:
        parts.append(f"claimed={timing['claimed_at']}")
        if timing["duration_seconds"] is not None:
            parts.append(f"duration={timing['duration_seconds']:.3f}s")
    if record.get("error"):
        parts.append(f"error={record['error']!r}")
    if (downstream := Downstream.from_record(record)) is not None:
        parts.append(f"{downstream.kind}={downstream.name}")
        parts.append(f"downstream={downstream.state.value}")
        if downstream.error:
            parts.append(f"downstream_error={downstream.error!r}")
    parts.append(f"-> {run.state.value}")
    return "  ".join(parts)


def run_timing(record: Mapping[str, Any]) -> dict[str, Any]:
    """When the run's last claim and its completion committed (Firestore's clock), and the
    seconds between: a run taken over is timed from the takeover."""
    claimed, completed = record.get("claimed_at"), record.get("completed_at")
    claimed = claimed if isinstance(claimed, datetime) else None
    completed = completed if isinstance(completed, datetime) else None
    return {
        "claimed_at": format_rfc3339(claimed) if claimed else None,
        "completed_at": format_rfc3339(completed) if completed else None,
        "duration_seconds": (completed - claimed).total_seconds() if claimed and completed else None,
    }
