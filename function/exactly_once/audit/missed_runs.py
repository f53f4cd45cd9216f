"""Missed-run audit: which scheduled runs should exist, and what the ledger says of each.

Cloud Scheduler keeps no history an operator can query, and a run whose every retry failed
leaves nothing behind. The schedule itself says which runs should exist, and each run's id is
a pure function of (project, location, job, schedule time), so the audit needs no index and
no query: it computes the expected run ids and reads those documents directly.

Each verdict is the lifecycle's (ledger/lifecycle/verdicts.py `judge`), from the record as read on
Firestore's clock: a run is *missed* once its retry window has closed (no further delivery can
arrive) and the ledger holds no completed record for it. The window is computed by the caller
from the job's retry policy (policy/scheduler_guardrails/rules/timing/rules.py), because this
module ships with the function, which imports nothing outside function/.

A run recorded by another target (another function that shares the runs collection and the
job name) is missed as soon as it is seen, completed or not: the function refuses this
stack's every delivery of it (`wrong_target`), so this stack's job never runs it.

Shared by the scheduled audit job (jobs/missed_runs.py) and the `python -m ops audit` CLI.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from exactly_once.audit.config import AuditedJob
from exactly_once.audit.pauses import PauseHistory, paused_at
from exactly_once.audit.schedule import FireTime, SharedWalks, checked_schedule, fires, following_fires
from exactly_once.ledger import lifecycle
from exactly_once.ledger.downstream import Downstream
from exactly_once.ledger.fields import TARGET
from exactly_once.ledger.lifecycle import StoredRecord, Verdict
from exactly_once.run_key import RunKey, format_rfc3339

# Reads the ledger records of the given run ids; absent ids are left out of the result.
RecordReader = Callable[[Sequence[str]], Mapping[str, StoredRecord]]


@dataclass(frozen=True)
class ExpectedRun:
    job: str
    # The instant the run is judged by: the one its record was found at (a repeated wall
    # time's second instant when only that one has a record), else the first.
    schedule_time: datetime  # UTC
    run_id: str
    state: Verdict
    window_closes: datetime
    record: StoredRecord | None
    # The target this stack's function records, as judged against (None: not known).
    target: str | None = None
    # Whether a catch-up delivery of it would be claimed (lifecycle.deliverable_again).
    deliverable: bool = False

    @property
    def fields(self) -> Mapping[str, object]:
        return self.record.fields if self.record is not None else {}

    @property
    def other_target(self) -> str | None:
        """The target that recorded the run when it is not this stack's, else None."""
        if self.record is not None and lifecycle.recorded_by_another_target(self.record.fields, self.target):
            return str(self.record.fields[TARGET])
        return None

    @property
    def detail(self) -> str:
        """Why the run is in its state, for the operator reading one line."""
        record = self.fields
        if self.state is Verdict.MISSED:
            if (other := self.other_target) is not None:
                return (
                    f"recorded by target {other}, not this stack's {self.target}: another function shares "
                    "the runs collection and the job name, and this stack's deliveries of the run are "
                    "refused (wrong_target)"
                )
            if record:
                return f"an attempt claimed it (attempt {record.get('attempt_id')}) but none completed it"
            return "no delivery reached the ledger"
        if self.state in (Verdict.TERMINAL_FAILURE, Verdict.SKIPPED_LATE):
            return str(record.get("error") or "")
        downstream = Downstream.from_record(record)
        if downstream is not None and self.state in (Verdict.COMPLETED, Verdict.DOWNSTREAM_FAILED):
            error = f": {downstream.error}" if downstream.error else ""
            return f"{downstream.kind} {downstream.name} {downstream.state.value}{error}"
        if self.state is Verdict.PENDING:
            return f"retry window open until {format_rfc3339(self.window_closes)}"
        if self.state is Verdict.IN_PROGRESS:
            return f"attempt {record.get('attempt_id')} holds it"
        if self.state is Verdict.PAUSED:
            return "the stack paused the job (paused: true): Cloud Scheduler did not deliver it"
        return ""


def stack_target(read_records: RecordReader, own_run_ids: Sequence[str]) -> str | None:
    """The target this stack's function records, read from runs it claimed itself (the
    audit's own, newest first): the function writes its target with every claim, so no
    configuration has to repeat the name of the service or of the function it serves. None
    when none of them has a record with a target."""
    records = read_records(own_run_ids) if own_run_ids else {}
    for run_id in own_run_ids:
        stored = records.get(run_id)
        target = stored.fields.get(TARGET) if stored is not None else None
        if target:
            return str(target)
    return None


def expected_runs(
    jobs: Iterable[AuditedJob], *, since: datetime, until: datetime
) -> list[tuple[AuditedJob, FireTime]]:
    """Every (job, fire time) the jobs' schedules expect in [since, until], from the time
    each job was deployed on."""
    return [
        (job, fire)
        for job in jobs
        for fire in fires(job.schedule, job.time_zone, since, until)
        if _was_deployed(job, fire.instant)
    ]


def _was_deployed(job: AuditedJob, instant: datetime) -> bool:
    return job.not_before is None or instant >= job.not_before


def runs_whose_window_closed(job: AuditedJob, *, after: datetime, up_to: datetime) -> list[FireTime]:
    """The job's fire times whose retry window closed in (after, up_to].

    Successive audits judge back-to-back spans, each from where the last one stopped, so each
    run is judged exactly once: by the first audit after its last possible delivery."""
    return list(
        itertools.takewhile(lambda fire: window_closes(job, fire) <= up_to, closing_after(job, after))
    )


def closing_after(job: AuditedJob, after: datetime, walks: SharedWalks | None = None) -> Iterator[FireTime]:
    """The job's fire times whose retry window closes after `after`, in the order they close,
    without end: an audit takes as many as its budget allows. A job's window is the same for
    each of its runs, so they close in the order they fire. `walks` shares each schedule's walk
    between the jobs of one audit. Raises AuditError (or what croniter raises) for a schedule
    or zone the audit cannot walk."""
    window = timedelta(seconds=job.retry_window_seconds)
    zone = checked_schedule(job.schedule, job.time_zone)
    start = after - window
    walk = (
        walks.following(job.schedule, zone, start)
        if walks is not None
        else following_fires(job.schedule, zone, start)
    )
    return (fire for fire in walk if _was_deployed(job, fire.instant))


def window_closes(job: AuditedJob, fire: FireTime) -> datetime:
    """When no delivery of the run can come any more: its retry window's end."""
    return fire.instant + timedelta(seconds=job.retry_window_seconds)


def judge_runs(
    expected: Sequence[tuple[AuditedJob, FireTime]],
    *,
    project: str,
    location: str,
    now: datetime,
    read_records: RecordReader,
    lease: timedelta,
    target: str | None = None,
    pauses: PauseHistory | None = None,
) -> list[ExpectedRun]:
    """The verdict on each expected run, in time order. `project` and `location` are the values
    the stack sends in X-Job-Project / X-Job-Location: they are part of every run id. `now` is
    the audit's horizon on Firestore's clock; each record is judged as of its own read.
    `target` is the one this stack's function records (stack_target): a run recorded by any
    other is missed. `pauses` is when each job was paused (audit/pauses.py); a job paused now
    with no history counts as paused for every run without a record. `lease` judges a record
    that names none (lifecycle.state_of)."""
    ids = [
        [RunKey(project, location, job.name, instant).run_id for instant in fire.instants]
        for job, fire in expected
    ]
    records = read_records([run_id for pair in ids for run_id in pair]) if ids else {}
    runs = []
    for (job, fire), run_ids in zip(expected, ids, strict=True):
        found = [
            (instant, run_id, records.get(run_id))
            for instant, run_id in zip(fire.instants, run_ids, strict=True)
        ]
        # A repeated wall time is one run: judged by whichever of its instants has the record
        # furthest along (completed, held, given back), else by its first instant.
        instant, run_id, record = (
            found[0] if len(found) == 1 else max(found, key=lambda item: lifecycle.progress(item[2], lease))
        )
        closes = window_closes(job, fire)
        history = pauses if pauses is not None else {}
        paused = paused_at(history, job.name, fire.instant) or (job.paused and job.name not in history)
        verdict = lifecycle.judge(
            record, window_closed=closes <= now, paused=paused, target=target, default_lease=lease
        )
        downstream = Downstream.from_record(record.fields) if record is not None else None
        if verdict is Verdict.COMPLETED and downstream is not None and downstream.state.failed:
            verdict = Verdict.DOWNSTREAM_FAILED
        deliverable = lifecycle.deliverable_again(record, verdict, target=target, default_lease=lease)
        runs.append(ExpectedRun(job.name, instant, run_id, verdict, closes, record, target, deliverable))
    return sorted(runs, key=lambda run: (run.schedule_time, run.job))
