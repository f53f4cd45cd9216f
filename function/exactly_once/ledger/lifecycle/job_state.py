"""The state of a job across its runs: its failure streak, its pause, the pause's announcement.

A run's own state is the lifecycle's (lifecycle.py). A job with pauseAfterFailures has a state of
its own, kept in its status document (job_status.py) and decided only here: how many of its runs
failed in a row, and whether that streak paused it. Pure, like the lifecycle: no Firestore, no
clock; a status document is parsed once (`JobStatus.of`) and judged as of its read.

The states of a pausing job, as one read of its status sees them (`JobState`):

- `running`: fewer failed runs in a row than pauseAfterFailures: its runs execute.
- `pausing`: as many failed runs in a row as pauseAfterFailures, no pause recorded for them: the
  next run is skipped, and the skip's commit records the pause.
- `paused`: the pause recorded for these failed runs: its runs are skipped.

The transitions are `JOB_TRANSITIONS` (shown with the run's in the lifecycle package's docstring
and in docs/operations.md).

Three rules hold across the table:

1. **A skip stands only on the status it was decided from.** Its commit carries an update of
   the status conditioned on the read that decided it, so a success or a resume that committed
   first refuses it, and the run is decided again.
2. **A pause is announced by the commit that records it.** Exactly one skip's commit moves a job
   from `pausing` to `paused`, and only the delivery that knows that commit is its own (answered,
   or read back after its retry was refused) writes the ERROR line.
3. **The streak is what the recorded runs say, never a stale flag.** A success empties it
   whatever the serving function's job table holds (a region on an older table, a key removed
   and put back); a pause counts as recorded only for the failed runs it names, so a limit raised
   while paused pauses, and announces, again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from exactly_once.ledger.fields import (
    FAILED_RUNS,
    FAILURE_PAUSED_AFTER,
    FAILURE_PAUSED_AT,
    FAILURE_RESUMED_AT,
    LAST_SKIPPED_RUN,
)
from exactly_once.ledger.lifecycle.states import StoredRecord


class JobState(StrEnum):
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"


class JobEvent(StrEnum):
    RUN_FAILED = "run failed"
    RUN_SUCCEEDED = "run succeeded"
    SKIP = "skip"
    RESUME = "resume"


@dataclass(frozen=True)
class JobTransition:
    """One row of the job's lifecycle, as lifecycle.Transition is one of a run's."""

    sources: tuple[JobState, ...]
    event: JobEvent
    target: str
    write: str
    carries: str


_ANY: Final = (JobState.RUNNING, JobState.PAUSING, JobState.PAUSED)

JOB_TRANSITIONS: Final[tuple[JobTransition, ...]] = (
    JobTransition(
        _ANY,
        JobEvent.RUN_FAILED,
        "running, or pausing at pauseAfterFailures failed runs",
        "merge in the commit that ends the failed attempt (release or terminal completion)",
        "the run's id added to the failed runs once, however many of its attempts fail",
    ),
    JobTransition(
        _ANY,
        JobEvent.RUN_SUCCEEDED,
        "running",
        "merge in the commit that completes the run, whatever the job table says",
        "no failed runs, no pause",
    ),
    JobTransition(
        (JobState.PAUSING,),
        JobEvent.SKIP,
        "paused",
        "update conditioned on the status as read, in the commit that records the run skipped",
        "when (the commit time) and after which runs it paused; the one ERROR line, once that "
        "commit is known to be ours",
    ),
    JobTransition(
        (JobState.PAUSED,),
        JobEvent.SKIP,
        "paused",
        "update conditioned on the status as read, in the commit that records the run skipped",
        "the run skipped last",
    ),
    JobTransition(
        _ANY,
        JobEvent.RESUME,
        "running",
        "merge by `ops resume`",
        "no failed runs, no pause, when it was resumed",
    ),
)


@dataclass(frozen=True)
class JobStatus:
    """A job's status document as one read saw it, parsed once: what its state is decided from.
    `update_time` None: no document (the job never ended a run)."""

    failed_runs: tuple[str, ...] = ()
    paused_after: tuple[str, ...] = ()
    paused_at: datetime | None = None
    update_time: datetime | None = None

    @classmethod
    def of(cls, record: StoredRecord | None) -> JobStatus:
        if record is None:
            return cls()
        fields = record.fields
        paused_at = fields.get(FAILURE_PAUSED_AT)
        return cls(
            _run_ids(fields.get(FAILED_RUNS)),
            _run_ids(fields.get(FAILURE_PAUSED_AFTER)),
            paused_at if isinstance(paused_at, datetime) else None,
            record.update_time,
        )


def state_of(status: JobStatus, limit: int) -> JobState:
    """The job's state under pauseAfterFailures `limit`. A recorded pause counts only while the
    runs it names are where the streak starts and are at least `limit` of them: a success or a
    resume forgets it, and a limit raised past it leaves the job to pause again."""
    failed = status.failed_runs
    if len(failed) < limit:
        return JobState.RUNNING
    after = status.paused_after
    if len(after) >= limit and failed[: len(after)] == after:
        return JobState.PAUSED
    return JobState.PAUSING


@dataclass(frozen=True)
class Skip:
    """A run its paused job holds back: the table's `skip` from `pausing` (which records the
    pause, and `announces` it once its commit is known to be ours) or from `paused`."""

    failed_runs: tuple[str, ...]  # the streak the pause is after
    announces: bool

    def fields(self, run_id: str, commit_time: Any) -> dict[str, Any]:
        """What the skip's commit writes to the status it was decided on: the pause (when, on
        Firestore's clock, and after which runs) when it records it; else only the run skipped,
        so that the write exists to carry its condition."""
        fields: dict[str, Any] = {LAST_SKIPPED_RUN: run_id}
        if self.announces:
            fields[FAILURE_PAUSED_AT] = commit_time
            fields[FAILURE_PAUSED_AFTER] = list(self.failed_runs)
        return fields


def holds_back(status: JobStatus, limit: int, run_id: str) -> Skip | None:
    """How the run `run_id` (a scheduled run; a forced one always runs) is skipped, or None
    when it runs. A failing run's own retries run: a success of one ends the streak, and
    skipping it would record a failed run as completed."""
    state = state_of(status, limit)
    if state is JobState.RUNNING or run_id in status.failed_runs:
        return None
    return Skip(status.failed_runs[:limit], announces=state is JobState.PAUSING)


@dataclass(frozen=True)
class Pause:
    """A job's pause as its status holds it, for an operator: since when (None: not recorded
    yet, it begins with the next run) and after which runs."""

    since: datetime | None
    after: tuple[str, ...]


def pause_of(status: JobStatus, limit: int) -> Pause | None:
    """The job's pause under `limit`, or None while it runs."""
    state = state_of(status, limit)
    if state is JobState.RUNNING:
        return None
    if state is JobState.PAUSED:
        return Pause(status.paused_at, status.paused_after)
    return Pause(None, status.failed_runs[:limit])


# What a success makes of any job's streak, and a resume of a paused job's.
NOT_PAUSED: Final[Mapping[str, Any]] = {FAILED_RUNS: [], FAILURE_PAUSED_AT: None, FAILURE_PAUSED_AFTER: None}


def resume_fields(commit_time: Any) -> dict[str, Any]:
    """What `ops resume` merges into a paused job's status: its failed runs forgotten, so its next
    run executes and pauseAfterFailures more failures pause it again."""
    return {**NOT_PAUSED, FAILURE_RESUMED_AT: commit_time}


def _run_ids(value: object) -> tuple[str, ...]:
    return tuple(str(run_id) for run_id in value) if isinstance(value, list) else ()
