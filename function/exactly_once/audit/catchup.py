"""Which missed runs the audit delivers again: a job's catch-up policy applied to the ledger.

A run is caught up only when no delivery of it can still come (its retry window has closed)
and a delivery of it now would be claimed (ledger/lifecycle.py `deliverable_again`): it has no
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

from exactly_once.audit.config import MAX_CATCHUP_WINDOW_RUNS, AuditedJob, CatchupRuns
from exactly_once.audit.missed_runs import ExpectedRun, RecordReader, judge_runs
from exactly_once.audit.pauses import PauseHistory
from exactly_once.audit.schedule import fires
from exactly_once.ledger import lifecycle

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
    assert job.catchup is not None
    since = now - timedelta(seconds=job.catchup.window_seconds)
    # The window is (now - windowSeconds, now]: a run exactly at its start is outside it.
    walked = [
        fire
        for fire in fires(job.schedule, job.time_zone, since, now, newest=MAX_CATCHUP_WINDOW_RUNS + 1)
        if fire.instant > since
    ]
    truncated = len(walked) > MAX_CATCHUP_WINDOW_RUNS
    in_window = [
        fire
        for fire in walked[-MAX_CATCHUP_WINDOW_RUNS:]
        if job.not_before is None or fire.instant >= job.not_before
    ]
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
    if job.catchup.runs is CatchupRuns.ALL:
        return JobWindow([run for run in runs if run.deliverable], truncated)
    closed = [run for run in runs if run.window_closes <= now]
    later = runs[len(closed) :]
    newest = closed[-1] if closed else None
    if (
        newest is not None
        and newest.deliverable
        and not any(lifecycle.has_record(run.record, lease) for run in later)
    ):
        return JobWindow([newest], truncated)
    return JobWindow([], truncated)


def first_to_deliver(chosen: Sequence[ExpectedRun]) -> list[ExpectedRun]:
    """The runs one audit delivers: oldest first, at most MAX_CATCHUP_PER_AUDIT."""
    return sorted(chosen, key=lambda run: (run.schedule_time, run.job))[:MAX_CATCHUP_PER_AUDIT]
