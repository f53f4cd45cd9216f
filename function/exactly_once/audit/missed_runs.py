"""Missed-run audit: which scheduled runs should exist, and what the ledger says of each.

Cloud Scheduler keeps no history an operator can query, and a run whose every retry failed
leaves nothing behind. The schedule itself says which runs should exist, and each run's id is
a pure function of (project, location, job, schedule time), so the audit needs no index and
no query: it computes the expected run ids and reads those documents directly.

A run is *missed* once its retry window has closed (no further delivery can arrive) and the
ledger holds no completed record for it. The window is computed by the caller from the job's
retry policy (infra/timing/rules.py), because this module ships with the function, which imports
nothing outside function/.

A run recorded by another target (another function that shares the runs collection and the
job name) is missed as soon as it is seen, completed or not: the function refuses this
stack's every delivery of it (`wrong_target`), so this stack's job never runs it.

Shared by the scheduled audit job (jobs/missed_runs.py) and the `python -m ops audit` CLI.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from exactly_once.audit.config import AuditedJob, AuditError
from exactly_once.delivery.scheduler_request import RunKey, format_rfc3339
from exactly_once.ledger.fields import RESULT, SKIPPED_LATE, TARGET, recorded_by_another_target
from exactly_once.targets.downstream import Downstream

# A schedule over an audit window cannot sensibly expect more runs than this (one a minute for
# a week); a larger window is an operator's typo, not a workload.
MAX_EXPECTED_RUNS = 10_080


class RunState(StrEnum):
    COMPLETED = "completed"
    TERMINAL_FAILURE = "terminal failure"
    IN_PROGRESS = "in progress"  # a claim exists and the retry window is still open
    PENDING = "pending"  # no record yet, but a delivery may still come
    MISSED = "missed"
    # Completed, but the downstream work it started (a proxy run's execution) failed or was
    # cancelled: reported like a missed run, since the work did not happen as scheduled.
    DOWNSTREAM_FAILED = "downstream failed"
    PAUSED = "paused"  # no record, and the stack pauses the job: skipped on purpose
    # Recorded skipped: delivered past the job's startingDeadlineSeconds, never run, never missed.
    SKIPPED_LATE = "skipped late"


@dataclass(frozen=True)
class ExpectedRun:
    job: str
    schedule_time: datetime  # UTC
    run_id: str
    state: RunState
    window_closes: datetime
    record: Mapping[str, Any] | None
    # The target this stack's function records, as judged against (None: not known).
    target: str | None = None

    @property
    def other_target(self) -> str | None:
        """The target that recorded the run when it is not this stack's, else None."""
        if self.record is not None and recorded_by_another_target(self.record, self.target):
            return str(self.record[TARGET])
        return None

    @property
    def detail(self) -> str:
        """Why the run is in its state, for the operator reading one line."""
        record = self.record or {}
        if self.state is RunState.MISSED:
            if (other := self.other_target) is not None:
                return (
                    f"recorded by target {other}, not this stack's {self.target}: another function shares "
                    "the runs collection and the job name, and this stack's deliveries of the run are "
                    "refused (wrong_target)"
                )
            if record:
                return f"an attempt claimed it (attempt {record.get('attempt_id')}) but none completed it"
            return "no delivery reached the ledger"
        if self.state in (RunState.TERMINAL_FAILURE, RunState.SKIPPED_LATE):
            return str(record.get("error") or "")
        downstream = Downstream.from_record(record)
        if downstream is not None and self.state in (RunState.COMPLETED, RunState.DOWNSTREAM_FAILED):
            error = f": {downstream.error}" if downstream.error else ""
            return f"{downstream.kind} {downstream.name} {downstream.state.value}{error}"
        if self.state is RunState.PENDING:
            return f"retry window open until {format_rfc3339(self.window_closes)}"
        if self.state is RunState.IN_PROGRESS:
            return f"attempt {record.get('attempt_id')} holds it"
        if self.state is RunState.PAUSED:
            return "the stack pauses the job (paused: true): Cloud Scheduler did not deliver it"
        return ""


def checked_schedule(schedule: str, time_zone: str) -> ZoneInfo:
    """The schedule's zone, once both the zone and the cron expression are known to be valid."""
    try:
        zone = ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise AuditError(f"{time_zone!r} is not an IANA time zone") from None
    if not croniter.is_valid(schedule):
        raise AuditError(f"{schedule!r} is not a unix-cron schedule")
    return zone


def following_fire_times(schedule: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Instants (UTC), strictly after `after` and strictly increasing, at which a unix-cron
    `schedule` read in `zone` fires.

    Cron fields are wall-clock times, so croniter walks naive local times and zoneinfo turns
    each into an instant; croniter never sees an offset and cannot get a DST change wrong.
    A wall time skipped by spring-forward does not fire; one repeated by fall-back fires once,
    at its first occurrence.
    """
    iterator = croniter(schedule, after.astimezone(zone).replace(tzinfo=None))
    last = after
    while True:
        wall: datetime = iterator.get_next(datetime)
        instant = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) != wall:
            continue  # inside a spring-forward gap: this wall time never happens
        if instant > last:
            last = instant
            yield instant


def fire_times(schedule: str, time_zone: str, since: datetime, until: datetime) -> list[datetime]:
    """Instants (UTC) in [since, until] at which a unix-cron `schedule` read in `time_zone` fires."""
    if since.tzinfo is None or until.tzinfo is None:
        raise AuditError("audit window bounds must carry a time zone offset")
    if until < since:
        raise AuditError(
            f"the window ends ({format_rfc3339(until)}) before it starts ({format_rfc3339(since)})"
        )
    zone = checked_schedule(schedule, time_zone)
    times: list[datetime] = []
    # From one second before `since`, so a fire time exactly at `since` is included.
    following = following_fire_times(schedule, zone, since - timedelta(seconds=1))
    for instant in itertools.takewhile(lambda instant: instant <= until, following):
        if instant < since:
            continue  # `since` had a fraction of a second
        times.append(instant)
        if len(times) > MAX_EXPECTED_RUNS:
            raise AuditError(
                f"schedule {schedule!r} fires more than {MAX_EXPECTED_RUNS} times between "
                f"{format_rfc3339(since)} and {format_rfc3339(until)}: narrow the window"
            )
    return times


def classify(
    record: Mapping[str, Any] | None,
    window_closes: datetime,
    now: datetime,
    target: str | None = None,
    *,
    paused: bool = False,
) -> RunState:
    """One run's state from its ledger record (or its absence) and its retry window; `target`
    is the one this stack's function records (None: every record counts as this stack's).
    A run of a `paused` job without a record was skipped on purpose: paused, never missed
    (one that has a record, a manual run say, is judged by it as usual)."""
    if record is None and paused:
        return RunState.PAUSED
    if record is not None and recorded_by_another_target(record, target):
        return RunState.MISSED  # refused here on every delivery: this stack never runs it
    if record is not None and record.get("status") == "completed":
        if record.get("result") == "terminal_failure":
            return RunState.TERMINAL_FAILURE
        if record.get(RESULT) == SKIPPED_LATE:
            return RunState.SKIPPED_LATE
        downstream = Downstream.from_record(record)
        if downstream is not None and downstream.state.failed:
            return RunState.DOWNSTREAM_FAILED
        return RunState.COMPLETED
    if now < window_closes:
        return RunState.IN_PROGRESS if record is not None else RunState.PENDING
    return RunState.MISSED


# Reads the ledger records of the given run ids; absent ids are left out of the result.
RecordReader = Callable[[Sequence[str]], Mapping[str, Mapping[str, Any]]]


def stack_target(read_records: RecordReader, own_run_ids: Sequence[str]) -> str | None:
    """The target this stack's function records, read from runs it claimed itself (the
    audit's own, newest first): the function writes its target with every claim, so no
    configuration has to repeat the name of the service or of the function it serves. None
    when none of them has a record with a target."""
    records = read_records(own_run_ids) if own_run_ids else {}
    for run_id in own_run_ids:
        target = records.get(run_id, {}).get(TARGET)
        if target:
            return str(target)
    return None


def expected_runs(
    jobs: Iterable[AuditedJob], *, since: datetime, until: datetime
) -> list[tuple[AuditedJob, datetime]]:
    """Every (job, schedule time) the jobs' schedules expect in [since, until], from the time
    each job was deployed on."""
    return [
        (job, instant)
        for job in jobs
        for instant in fire_times(job.schedule, job.time_zone, since, until)
        if _was_deployed(job, instant)
    ]


def _was_deployed(job: AuditedJob, instant: datetime) -> bool:
    return job.not_before is None or instant >= job.not_before


def runs_whose_window_closed(
    jobs: Iterable[AuditedJob], *, after: datetime, up_to: datetime
) -> list[tuple[AuditedJob, datetime]]:
    """(job, schedule time) pairs whose retry window closed in (after, up_to].

    Successive scheduled audits use back-to-back intervals, so each run is judged exactly
    once: by the first audit after its last possible delivery.
    """
    found = []
    for job in jobs:
        window = timedelta(seconds=job.retry_window_seconds)
        for instant in fire_times(job.schedule, job.time_zone, after - window, up_to - window):
            if after < instant + window <= up_to and _was_deployed(job, instant):
                found.append((job, instant))
    return found


def judge_runs(
    expected: Sequence[tuple[AuditedJob, datetime]],
    *,
    project: str,
    location: str,
    now: datetime,
    read_records: RecordReader,
    target: str | None = None,
) -> list[ExpectedRun]:
    """The state of each expected run, in time order. `project` and `location` are the values
    the stack sends in X-Job-Project / X-Job-Location: they are part of every run id.
    `target` is the one this stack's function records (stack_target): a run recorded by any
    other is missed."""
    ids = [RunKey(project, location, job.name, instant).run_id for job, instant in expected]
    records = read_records(ids) if ids else {}
    runs = []
    for (job, instant), run_id in zip(expected, ids, strict=True):
        closes = instant + timedelta(seconds=job.retry_window_seconds)
        record = records.get(run_id)
        state = classify(record, closes, now, target, paused=job.paused)
        runs.append(ExpectedRun(job.name, instant, run_id, state, closes, record, target))
    return sorted(runs, key=lambda run: (run.schedule_time, run.job))
