"""The missed-run audit's verdict on one expected run, from its record as read: the lifecycle's
states seen from the audit's side (`judge`), and whether catch-up may deliver it again."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Final

from exactly_once.ledger.fields import EXPIRE_AT, RESULT, TARGET
from exactly_once.ledger.lifecycle.states import (
    ATTEMPT_ID,
    ERROR,
    LEASE_SECONDS,
    STATUS,
    JobResult,
    State,
    StoredRecord,
    recorded_by_another_target,
    result_of,
    state_of,
)
from exactly_once.ledger.lifecycle.table import claimable

# Every field the audit's verdict on a run reads (`judge`, `deliverable_again`, `has_record`,
# `progress`), and the two its line quotes (who held the run, why it failed): the audit reads
# records projected to these (and the downstream work's), so a field the verdict starts to read
# must be added here or the audit judges without it.
JUDGED_FIELDS: Final = (STATUS, EXPIRE_AT, LEASE_SECONDS, RESULT, TARGET, ATTEMPT_ID, ERROR)


class Verdict(StrEnum):
    """What the missed-run audit says of one expected run."""

    COMPLETED = "completed"
    TERMINAL_FAILURE = "terminal failure"
    SKIPPED_LATE = "skipped late"
    IN_PROGRESS = "in progress"  # a record exists and a delivery may still come
    PENDING = "pending"  # no record yet, and a delivery may still come
    MISSED = "missed"
    PAUSED = "paused"  # no record, and the job was paused at the run's time: skipped on purpose
    # Completed, but the work it started downstream failed or was cancelled. The lifecycle
    # never reads what a run started; the audit refines `completed` to this.
    DOWNSTREAM_FAILED = "downstream failed"


def judge(
    record: StoredRecord | None,
    *,
    window_closed: bool,
    paused: bool,
    target: str | None,
    default_lease: timedelta,
) -> Verdict:
    """One expected run's verdict, from its record (or its absence) read at the audit's time.
    `window_closed`: no delivery of it can still come. `paused`: the job was paused at the
    run's time. `target`: the one this stack's function records (None: any counts as ours)."""
    state = state_of(record, default_lease)
    if record is not None and recorded_by_another_target(record.fields, target):
        return Verdict.MISSED  # refused on every delivery: this stack never runs it
    if state in (State.COMPLETED, State.EXPIRED):
        # A completed record past its retention still says how its run ended: a delivery would
        # take it over, but the run happened, so it is judged by its result, never missed (and
        # never delivered again by catch-up).
        return _BY_RESULT[result_of(record.fields if record else {}) or JobResult.SUCCEEDED]
    unrecorded = state is State.ABSENT
    if unrecorded and paused:
        return Verdict.PAUSED
    if not window_closed:
        return Verdict.PENDING if unrecorded else Verdict.IN_PROGRESS
    return Verdict.MISSED


_BY_RESULT: Final[Mapping[JobResult, Verdict]] = {
    JobResult.SUCCEEDED: Verdict.COMPLETED,
    JobResult.OVERLAP_SKIPPED: Verdict.COMPLETED,
    JobResult.TERMINAL_FAILURE: Verdict.TERMINAL_FAILURE,
    JobResult.SKIPPED_LATE: Verdict.SKIPPED_LATE,
    # Skipped on purpose while the job was paused after failures: the ledger decided the run,
    # so it is never missed (and never delivered again by catch-up).
    JobResult.SKIPPED_PAUSED: Verdict.COMPLETED,
}


def deliverable_again(
    record: StoredRecord | None, verdict: Verdict, *, target: str | None, default_lease: timedelta
) -> bool:
    """Whether catch-up may deliver a missed run again: a delivery would own it now (absent,
    expired, released with a checkpoint, or lapsed), and it is this stack's. A run an attempt
    holds (a catch-up delivery still running) or another function recorded is not."""
    if verdict is not Verdict.MISSED:
        return False
    if record is not None and recorded_by_another_target(record.fields, target):
        return False
    return claimable(state_of(record, default_lease))


def has_record(record: StoredRecord | None, default_lease: timedelta) -> bool:
    """Whether any attempt left a record of the run (a completed one past its retention
    included: its run happened)."""
    return state_of(record, default_lease) is not State.ABSENT


def progress(record: StoredRecord | None, default_lease: timedelta) -> int:
    """How far along a run its record is, to pick between two records of one run (a wall time a
    fall-back repeats has two instants): completed, then held, given back, lapsed, none."""
    return _PROGRESS[state_of(record, default_lease)]


_PROGRESS: Final[Mapping[State, int]] = {
    State.ABSENT: 0,
    State.EXPIRED: 0,
    State.LAPSED: 1,
    State.RELEASED: 2,
    State.LEASED: 3,
    State.COMPLETED: 4,
}
