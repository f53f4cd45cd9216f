"""What one read of a run record says: its stored fields, parsed once, and its state as of the
read (Firestore's clock: the record's commit time and the read's own time)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from exactly_once.ledger.fields import EXPIRE_AT, RESULT, TARGET

# The record's own fields besides those named in fields.py (which others outside the ledger
# read): only the lifecycle writes or compares them.
STATUS: Final = "status"
ATTEMPT_ID: Final = "attempt_id"
LEASE_SECONDS: Final = "lease_seconds"
ERROR: Final = "error"
OUTPUT_JSON: Final = "output_json"
BODY_SHA256: Final = "body_sha256"


class Status(StrEnum):
    """The stored `status` field."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    RELEASED = "released"


class JobResult(StrEnum):
    """How a completed run ended: the stored `result` field."""

    SUCCEEDED = "succeeded"
    TERMINAL_FAILURE = "terminal_failure"
    OVERLAP_SKIPPED = "overlap_skipped"  # another run of the job held its lock (policy skip)
    SKIPPED_LATE = "skipped_late"  # delivered past the job's startingDeadlineSeconds: never run
    # The job was paused after pauseAfterFailures failed runs in a row: never run.
    SKIPPED_PAUSED = "skipped_paused"


class ClaimKind(StrEnum):
    """Which write made a claim, by the state it found."""

    CREATED = "created"
    TOOK_OVER_LEASE = "took_over_lease"  # the previous attempt's lease had lapsed
    RECLAIMED_EXPIRED = "reclaimed_expired"  # past expire_at: TTL deletion had not run yet
    RECLAIMED_RELEASED = "reclaimed_released"  # given back with a checkpoint


class State(StrEnum):
    ABSENT = "absent"
    EXPIRED = "expired"
    LEASED = "leased"
    LAPSED = "lapsed"
    RELEASED = "released"
    COMPLETED = "completed"


@dataclass(frozen=True)
class StoredRecord:
    """A run record as one read saw it. Also what the store returns for any document."""

    fields: Mapping[str, Any]
    update_time: datetime  # commit time of the record's last write (Firestore's clock)
    read_time: datetime  # when Firestore served this read (Firestore's clock)
    # Commit time of the write that created the document: equal to update_time when nothing
    # changed it since. None from a store that does not say.
    create_time: datetime | None = None


def state_of(record: StoredRecord | None, default_lease: timedelta) -> State:
    """The record's state as of its read. The lease is the one its owner wrote (the reader's
    configuration may differ mid-deploy); `default_lease` serves a record that names none."""
    if record is None:
        return State.ABSENT
    fields = record.fields
    status = fields.get(STATUS)
    if status == Status.COMPLETED:
        expire_at = fields.get(EXPIRE_AT)
        if isinstance(expire_at, datetime) and expire_at <= record.read_time:
            return State.EXPIRED
        return State.COMPLETED
    if status == Status.RELEASED:
        return State.RELEASED
    return State.LEASED if lease_seconds_left(record, default_lease) > 0 else State.LAPSED


def lease_seconds_left(record: StoredRecord, default_lease: timedelta) -> float:
    """Seconds left on an in-progress record's lease, on Firestore's clock: the lease runs
    from the owner's last write (claim or renewal). Zero or less: lapsed."""
    written = record.fields.get(LEASE_SECONDS)
    lease = float(written) if isinstance(written, int | float) else default_lease.total_seconds()
    return (record.update_time + timedelta(seconds=lease) - record.read_time).total_seconds()


def is_owned_by(record: StoredRecord | None, attempt_id: str) -> bool:
    """Whether `attempt_id` wrote the record's latest claim (its owner, or its last owner)."""
    return record is not None and record.fields.get(ATTEMPT_ID) == attempt_id


def holds_claim(record: StoredRecord | None, attempt_id: str) -> bool:
    """Whether the record is `attempt_id`'s claim, still in progress (its lease live or not)."""
    return (
        is_owned_by(record, attempt_id)
        and record is not None
        and record.fields.get(STATUS) == Status.IN_PROGRESS
    )


def result_of(fields: Mapping[str, Any]) -> JobResult | None:
    """A completed record's result (succeeded when a record names none); None otherwise."""
    if fields.get(STATUS) != Status.COMPLETED:
        return None
    recorded = fields.get(RESULT)
    return JobResult(recorded) if recorded in _RESULTS else JobResult.SUCCEEDED


# Built once: the audit asks result_of of every completed record it reads.
_RESULTS: Final = frozenset(JobResult)


def recorded_by_another_target(fields: Mapping[str, Any], target: str | None) -> bool:
    """Whether the function of `target` must refuse the run these fields hold: the one rule of
    the ledger's claim and of the missed-run audit. A record or a function without a target (one
    outside Cloud Run) is nobody else's."""
    recorded = fields.get(TARGET)
    return bool(target and recorded and recorded != target)


def seconds_held(record: StoredRecord | None, default_lease: timedelta) -> float:
    """How long an attempt still holds the run: what is left of a live lease, else zero (a job
    lock's holder is busy exactly as long, delivery/overlap.py)."""
    if state_of(record, default_lease) is not State.LEASED or record is None:
        return 0.0
    return lease_seconds_left(record, default_lease)


def is_completed(record: StoredRecord | None, default_lease: timedelta) -> bool:
    """Whether the record says its run completed (within its retention or past it)."""
    return state_of(record, default_lease) in (State.COMPLETED, State.EXPIRED)


def stored_status(fields: Mapping[str, Any]) -> str | None:
    """The record's stored status as written, for an operator to read (never to decide on)."""
    status = fields.get(STATUS)
    return str(status) if status is not None else None
