"""Which missed runs the audit delivers again: a job's catch-up policy applied to the ledger.

A run is caught up only when no delivery of it can still come (its retry window has closed)
and the ledger has no record of it at all: a run recorded by any attempt, completed, failed or
in progress, or by another target, is never sent again, so catch-up never competes with a
live attempt and never repeats a run. Delivering the same run twice (two audits, a retried
task) is harmless anyway: the run id is the lost run's, and the ledger lets one attempt run it.

`runs: all` delivers every such run in the window, oldest first; `runs: latest` delivers the
newest run whose window has closed, and only when no later run of the job has a record: the
job has moved on otherwise, and an old run would only repeat stale work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from exactly_once.audit.config import AuditedJob, CatchupRuns
from exactly_once.audit.missed_runs import ExpectedRun, RecordReader, fire_times, judge_runs

# At most this many deliveries per audit run (oldest first): the rest wait for the next
# audit, so one audit's run record (which lists them) stays small and its run short.
MAX_CATCHUP_PER_AUDIT = 100


def deliverable(run: ExpectedRun, now: datetime) -> bool:
    """Whether `run` may be delivered again at `now`: no delivery of it can still come, and no
    attempt ever left a record of it (or every one released it after a retryable failure)."""
    return run.record is None and run.window_closes <= now


def catchup_candidates(
    jobs: Iterable[AuditedJob],
    *,
    project: str,
    location: str,
    now: datetime,
    read_records: RecordReader,
    target: str | None = None,
) -> list[ExpectedRun]:
    """The runs to deliver again at `now` (the audit's schedule time), oldest first."""
    chosen: list[ExpectedRun] = []
    for job in jobs:
        if job.catchup is None or job.paused:
            continue  # a paused job's runs were skipped on purpose
        runs = _window_runs(
            job, now=now, project=project, location=location, read=read_records, target=target
        )
        unrecorded = [run for run in runs if deliverable(run, now)]
        if job.catchup.runs is CatchupRuns.ALL:
            chosen.extend(unrecorded)
            continue
        closed = [run for run in runs if run.window_closes <= now]
        if closed and closed[-1].record is None and all(run.record is None for run in runs[len(closed) :]):
            chosen.append(closed[-1])
    chosen.sort(key=lambda run: (run.schedule_time, run.job))
    return chosen[:MAX_CATCHUP_PER_AUDIT]


def _window_runs(
    job: AuditedJob,
    *,
    now: datetime,
    project: str,
    location: str,
    read: RecordReader,
    target: str | None,
) -> Sequence[ExpectedRun]:
    assert job.catchup is not None
    since = now - timedelta(seconds=job.catchup.window_seconds)
    times = [
        instant
        for instant in fire_times(job.schedule, job.time_zone, since, now)
        if job.not_before is None or instant >= job.not_before
    ]
    return judge_runs(
        [(job, instant) for instant in times],
        project=project,
        location=location,
        now=now,
        read_records=read,
        target=target,
    )
