"""Which missed runs the audit delivers again: a job's catch-up policy applied to the ledger.

A run is caught up only when no delivery of it can still come (its retry window has closed)
and a delivery of it now would be claimed (ledger/lifecycle/verdicts.py `deliverable_again`): it has no
record, or its every attempt gave it back (released with a checkpoint, which the delivery
resumes from), or its last attempt died (its lease lapsed). A run completed, held by a live
attempt, recorded by another target, or skipped while its job was paused is never sent again,
so catch-up never competes with a live attempt, never repeats a run, and a resume never makes
the pause's runs up. Delivering the same run twice (two audits, a retried task) is harmless
anyway: the run id is the lost run's, and the ledger lets one attempt run it.

`runs: all` delivers every such run in the window, oldest first; `runs: latest` delivers the
newest run whose window has closed, and only when no later run of the job has a record: the
job has moved on otherwise, and an old run would only repeat stale work.

A window is walked for at most MAX_CATCHUP_WINDOW_RUNS runs of a job (its newest), and at most
MAX_CATCHUP_PER_AUDIT runs are delivered per audit, oldest first: the rest wait for the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from exactly_once import log_fields, structured_log
from exactly_once.audit.config import MAX_CATCHUP_WINDOW_RUNS, AuditedJob, CatchupRuns
from exactly_once.audit.missed_runs import (
    ExpectedRun,
    RecordReader,
    judge_runs,
)
from exactly_once.audit.pauses import PauseHistory
from exactly_once.audit.redelivery import RedeliveryError, Sender
from exactly_once.audit.schedule import FireTime, fires
from exactly_once.audit.state import AuditRun
from exactly_once.ledger import lifecycle
from exactly_once.run_key import RunKey, format_rfc3339

# At most this many deliveries per audit run (oldest first): the rest wait for the next
# audit, so one audit's run record (which lists them) stays small and its run short.
MAX_CATCHUP_PER_AUDIT = 100


@dataclass(frozen=True)
class JobWindow:
    """What one job's catch-up window holds: the runs to deliver, and whether the window held
    more runs than an audit walks (the oldest were left unjudged)."""

    chosen: list[ExpectedRun]
    truncated: bool


def job_candidates(
    job: AuditedJob,
    *,
    project: str,
    location: str,
    now: datetime,
    read_records: RecordReader,
    lease: timedelta,
    target: str | None = None,
    pauses: PauseHistory | None = None,
) -> JobWindow:
    """The runs of `job`'s catch-up window to deliver again at `now` (the audit's horizon on
    Firestore's clock), oldest first. Raises AuditError for a schedule or zone the audit
    cannot read, for this job alone."""
    in_window, truncated = catchup_window(job, now)
    runs = judge_runs(
        [(job, fire) for fire in in_window],
        project=project,
        location=location,
        now=now,
        read_records=read_records,
        lease=lease,
        target=target,
        pauses=pauses,
    )
    return JobWindow(chosen_runs(job, runs, now=now, lease=lease), truncated)


def catchup_window(job: AuditedJob, now: datetime) -> tuple[list[FireTime], bool]:
    """The runs of `job`'s catch-up window at `now`, oldest first, at most its newest
    MAX_CATCHUP_WINDOW_RUNS; and whether the window held more. Raises AuditError for a schedule
    or zone the audit cannot read."""
    assert job.catchup is not None
    since = now - timedelta(seconds=job.catchup.window_seconds)
    # The window is (now - windowSeconds, now]: a run exactly at its start is outside it.
    walked = [
        fire
        for fire in fires(job.schedule, job.time_zone, since, now, newest=MAX_CATCHUP_WINDOW_RUNS + 1)
        if fire.instant > since
    ]
    in_window = [
        fire
        for fire in walked[-MAX_CATCHUP_WINDOW_RUNS:]
        if job.not_before is None or fire.instant >= job.not_before
    ]
    return in_window, len(walked) > MAX_CATCHUP_WINDOW_RUNS


def chosen_runs(
    job: AuditedJob, runs: Sequence[ExpectedRun], *, now: datetime, lease: timedelta
) -> list[ExpectedRun]:
    """Of the judged runs of `job`'s window, those its catch-up policy delivers again."""
    assert job.catchup is not None
    if job.catchup.runs is CatchupRuns.ALL:
        return [run for run in runs if run.deliverable]
    closed = [run for run in runs if run.window_closes <= now]
    later = runs[len(closed) :]
    newest = closed[-1] if closed else None
    if (
        newest is not None
        and newest.deliverable
        and not any(lifecycle.has_record(run.record, lease) for run in later)
    ):
        return [newest]
    return []


def first_to_deliver(chosen: Sequence[ExpectedRun]) -> list[ExpectedRun]:
    """The runs one audit delivers: oldest first, at most MAX_CATCHUP_PER_AUDIT."""
    return sorted(chosen, key=lambda run: (run.schedule_time, run.job))[:MAX_CATCHUP_PER_AUDIT]


def catch_up(run: AuditRun, send: Sender) -> list[dict[str, str]]:
    """Deliver again each run the jobs' catch-up policies pick, oldest first; one
    `catchup_delivery` line each. Returns the runs handed over (job, schedule time, run id, how).
    A run whose hand-over failed is left to the next audit, and logged as such. Every catching-up
    job's window is read together, in pages, as time allows: a job whose window was not read
    whole is left to the next audit."""
    context = run.context
    windows = run.per_job(
        lambda job: (job, *catchup_window(job, run.horizon)),
        [job for job in run.config.jobs if job.catchup is not None],
    )
    ids = {
        job.name: [
            RunKey(context.project, context.location, job.name, instant).run_id
            for fire in window
            for instant in fire.instants
        ]
        for job, window, _ in windows
    }
    every_id = [run_id for job_ids in ids.values() for run_id in job_ids]
    found, read = run.deadline.read_pages(run.read_records, every_id)
    chosen: list[ExpectedRun] = []
    left: list[str] = []
    position = 0
    for job, window, truncated in windows:
        position += len(ids[job.name])
        if position > read:
            left.append(job.name)
            continue
        if truncated:
            _window_truncated(run, job)
        runs = judge_runs(
            [(job, fire) for fire in window],
            project=context.project,
            location=context.location,
            now=run.horizon,
            read_records=lambda run_ids: {run_id: found[run_id] for run_id in run_ids if run_id in found},
            lease=run.lease,
            target=run.target,
            pauses=run.pauses,
        )
        chosen.extend(chosen_runs(job, runs, now=run.horizon, lease=run.lease))
    if left:
        _catchup_left(run, left)
    chosen = first_to_deliver(chosen)
    jobs = {job.name: job for job in run.config.jobs}
    delivered: list[dict[str, str]] = []
    for entry in chosen:
        stamp = format_rfc3339(entry.schedule_time)
        fields: dict[str, object] = {
            log_fields.EVENT: log_fields.CATCHUP_DELIVERY,
            log_fields.JOB: entry.job,
            log_fields.SCHEDULE_TIME: stamp,
            log_fields.RUN_ID: entry.run_id,
            "audit_run_id": context.run_id,
            "recorded": entry.record is not None,
        }
        try:
            via = send(jobs[entry.job], entry.schedule_time)
        except RedeliveryError as error:
            fields["delivered"] = False
            structured_log.emit(
                "ERROR",
                f"{log_fields.CATCHUP_DELIVERY}: job {entry.job} scheduled at {stamp} not handed over: "
                f"{error}; the next audit tries again while the run is inside its catch-up window",
                fields,
                run.stream,
            )
            continue
        fields["delivered"], fields["via"] = True, via
        why = "was never delivered" if entry.record is None else f"never completed ({entry.detail})"
        structured_log.emit(
            "WARNING",
            f"{log_fields.CATCHUP_DELIVERY}: job {entry.job} scheduled at {stamp} {why}; "
            f"delivered again ({via})",
            fields,
            run.stream,
        )
        delivered.append({"job": entry.job, "schedule_time": stamp, "run_id": entry.run_id, "via": via})
    return delivered


def _catchup_left(run: AuditRun, jobs: list[str]) -> None:
    structured_log.emit(
        "WARNING",
        f"catch-up of {len(jobs)} jobs ({', '.join(jobs)}) is left for the next audit: reading their "
        f"windows would not end in this audit's time (slowest read {run.deadline.slowest:.3f}s)",
        {"jobs_left": jobs, "audit_run_id": run.context.run_id},
        run.stream,
    )


def _window_truncated(run: AuditRun, job: AuditedJob) -> None:
    assert job.catchup is not None
    structured_log.emit(
        "WARNING",
        f"job {job.name}: its catch-up window ({job.catchup.window_seconds:g}s) holds more runs than an "
        "audit walks; only the newest were judged for catch-up",
        {log_fields.JOB: job.name, "audit_run_id": run.context.run_id},
        run.stream,
    )
