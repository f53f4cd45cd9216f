"""What a claim or a finish can come to besides success, and the record a claim writes for a run.

The decisions are the lifecycle's (lifecycle.py); these are how the ledger reports them to a
delivery: the exceptions its callers handle, and the claimed record of a RunKey.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from exactly_once.ledger.lifecycle import Finished, about_run, claimed_fields
from exactly_once.ledger.store import COMMIT_TIME
from exactly_once.run_key import RunKey


class RunAlreadyCompleted(Exception):
    """The run finished earlier: the job must not run again."""

    def __init__(self, run_id: str, finished: Finished, read_time: datetime | None = None) -> None:
        super().__init__(f"run {run_id} is completed")
        self.run_id = run_id
        # When Firestore served the read that found the record: the delivery's first reading
        # of Firestore's clock when its claim was refused (delivery/forced_runs.py).
        self.read_time = read_time
        self.result = finished.result
        self.output_json = finished.output_json
        # Of the body that ran the job ("" for records written without one).
        self.fingerprint = finished.fingerprint
        # The recorded reason of a terminal failure or a late skip.
        self.error = finished.error
        # Until the record's retention ends (Firestore's clock): how long the answer stands.
        self.seconds_left = finished.seconds_left


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
    """A claimed run's record (lifecycle.claimed_fields) for `key`. `now` (the instance's
    clock) only dates the TTL field; the lease is counted from the write's commit time."""
    return claimed_fields(
        attempt_id=attempt_id,
        lease=lease,
        expire_at=now + retention,  # the TTL field; completion re-dates it on Firestore's clock
        about=about_run(
            job_name=key.job_name,
            schedule_time=key.schedule_time,
            trigger=key.trigger.value,
            project=key.project,
            location=key.location,
        ),
        target=target,
        fingerprint=fingerprint,
        checkpoint_json=checkpoint_json,
        commit_time=COMMIT_TIME,
    )


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_attempt_id() -> str:
    return uuid.uuid4().hex
