"""A run record's states, its fields, and what reading one can tell a delivery.

The ledger (protocol.py) writes these records; the job locks (delivery/overlap.py) read another run's
record to tell whether it still holds its lease. Both judge a lease the same way, here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from exactly_once.delivery.scheduler_request import RunKey
from exactly_once.ledger.fields import (
    CHECKPOINT,
    CLAIMED_AT,
    COMPLETED_AT,
    EXPIRE_AT,
    RENEWED_AT,
    SCHEDULE_TIME,
    SKIPPED_LATE,
    TARGET,
    TRIGGER,
)
from exactly_once.ledger.store import COMMIT_TIME, StoredRecord


class RunStatus(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    # Given back after a retryable failure with a checkpoint to keep: claimable at once, like
    # a deleted record, by a claim that inherits the checkpoint. (Without one, the record is
    # deleted.)
    RELEASED = "released"


class ClaimKind(StrEnum):
    CREATED = "created"
    TOOK_OVER_LEASE = "took_over_lease"  # the previous attempt's lease had expired
    RECLAIMED_EXPIRED = "reclaimed_expired"  # past expire_at: TTL deletion had not run yet
    RECLAIMED_RELEASED = "reclaimed_released"  # released with a checkpoint by a failed attempt


class JobResult(StrEnum):
    SUCCEEDED = "succeeded"
    TERMINAL_FAILURE = "terminal_failure"
    OVERLAP_SKIPPED = "overlap_skipped"  # another run of the job held its lock (policy skip)
    SKIPPED_LATE = SKIPPED_LATE  # delivered past the job's startingDeadlineSeconds: never run


class RunAlreadyCompleted(Exception):
    """The run finished earlier: the job must not run again."""

    def __init__(
        self, run_id: str, fields: Mapping[str, Any], seconds_left: float, read_time: datetime | None = None
    ) -> None:
        super().__init__(f"run {run_id} is completed")
        self.run_id = run_id
        # When Firestore served the read that found the record: the delivery's first reading
        # of Firestore's clock when its claim was refused (delivery/forced_runs.py).
        self.read_time = read_time
        self.result = str(fields.get("result", JobResult.SUCCEEDED))
        self.output_json: str | None = fields.get("output_json")
        # Of the body that ran the job ("" for records written without one).
        self.fingerprint: str = fields.get("body_sha256") or ""
        # Until the record's retention ends (Firestore's clock): how long the answer stands.
        self.seconds_left = seconds_left


class RunInProgress(Exception):
    """Another attempt holds a live lease; it may still fail, so the caller should retry."""

    def __init__(
        self,
        run_id: str,
        retry_after_seconds: int,
        holder: str | None,
        fingerprint: str | None = None,
        read_time: datetime | None = None,
    ) -> None:
        super().__init__(f"run {run_id} is in progress (attempt {holder}), retry in {retry_after_seconds}s")
        self.run_id = run_id
        self.read_time = read_time  # as RunAlreadyCompleted's; None when no read found it
        self.retry_after_seconds = retry_after_seconds
        self.holder = holder
        self.fingerprint = fingerprint or ""


class WrongTarget(Exception):
    """The run's record was written by another function: two deployments share a runs
    collection and a job name. Deciding the run from it would silently swallow one of them."""

    def __init__(self, run_id: str, recorded: str, ours: str) -> None:
        super().__init__(
            f"run {run_id} is recorded for target {recorded!r}, not {ours!r}: two functions share "
            "a runs collection and a job name; give each its own collection or job names"
        )
        self.run_id = run_id
        self.recorded = recorded


class ClaimTooLate(Exception):
    """The claim's write came back after the store deadline: part of its lease, maybe all of
    it, was spent waiting, so the job is not started and the claim is given back."""

    def __init__(self, run_id: str, waited_seconds: float, allowed_seconds: float) -> None:
        super().__init__(
            f"Firestore confirmed the claim of run {run_id} after {waited_seconds:.1f}s, "
            f"past the {allowed_seconds:g}s allowed: the job was not started"
        )
        self.run_id = run_id


class LeaseLost(Exception):
    """Another attempt took the run over after this attempt's lease expired."""

    def __init__(self, claim: Any) -> None:
        super().__init__(f"attempt {claim.attempt_id} no longer owns run {claim.run_id}, fence {claim.fence}")
        self.claim = claim


class WritesRefused(Exception):
    """Firestore refused a write that rode in the run's own commit (a create of a document
    that exists, an update of one that does not): the commit applied nothing, and the run
    record is still this attempt's, unchanged."""

    def __init__(self, claim: Any, refusal: str) -> None:
        super().__init__(f"run {claim.run_id}: a write committed with the run was refused: {refusal}")
        self.claim = claim
        self.refusal = refusal


def in_progress_record(
    key: RunKey,
    attempt_id: str,
    now: datetime,
    *,
    lease: timedelta,
    retention: timedelta,
    fingerprint: str = "",
    target: str = "",
    checkpoint_json: str | None = None,
) -> dict[str, Any]:
    """A claimed run's record. Every field is always present (None until it applies), so a
    takeover's update replaces a completed record's leftovers too; a takeover of a run that
    has not completed carries its checkpoint over (`checkpoint_json`). `now` (the instance's
    clock) only dates the TTL field; the lease is counted from the write's commit time."""
    return {
        "status": RunStatus.IN_PROGRESS.value,
        "attempt_id": attempt_id,
        "lease_seconds": lease.total_seconds(),
        EXPIRE_AT: now + retention,  # the TTL field; completion re-dates it on Firestore's clock
        "job_name": key.job_name,
        SCHEDULE_TIME: key.schedule_time,
        TRIGGER: key.trigger.value,
        "project": key.project,
        "location": key.location,
        TARGET: target or None,
        "body_sha256": fingerprint or None,
        CLAIMED_AT: COMMIT_TIME,
        RENEWED_AT: None,
        COMPLETED_AT: None,
        "result": None,
        "error": None,
        "output_json": None,
        CHECKPOINT: checkpoint_json,
    }


def lease_seconds_left(stored: StoredRecord, default_lease: timedelta) -> float:
    """Seconds left on an in-progress record's lease, on Firestore's clock: the lease runs
    from the owner's last write (claim or renewal) for the lease the owner wrote (its
    configuration may differ from the reader's mid-deploy). Zero or less: expired."""
    written = stored.fields.get("lease_seconds")
    lease = float(written) if isinstance(written, int | float) else default_lease.total_seconds()
    return (stored.update_time + timedelta(seconds=lease) - stored.read_time).total_seconds()


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_attempt_id() -> str:
    return uuid.uuid4().hex
