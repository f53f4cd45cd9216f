"""The run ledger: claim a scheduled run, then complete or release it, exactly once.

Every step is a single-document conditional write, never a transaction:

- claim:    create() the record; it fails if the record exists. The commit time of the
            winning write is the attempt's *fence*, and the moment its lease starts.
- takeover: an expired lease (or an expired record) is overwritten with a write conditioned
            on the update_time just read: compare-and-swap, so two retries cannot both win.
- finish:   conditioned on the claim's update_time, so only the current owner can complete
            or release the run; a stale owner gets LeaseLost.

Clock model: every lease decision is made on Firestore's clock. A lease runs from the
claim's commit time (update_time) for the `lease_seconds` the claimer wrote; a reader judges
it against its read's read_time. An instance's own clock only feeds the TTL field of an
in-progress record, which nothing decides on. So instance clocks may be skewed by any amount.

Every call carries a deadline (retries included) derived from the lease, and a claim whose
winning write came back later than that deadline is given up rather than run: its lease may
already be partly or wholly gone.

A first delivery costs exactly two writes (create + complete). A duplicate costs a failed
create and one read, and never contends on a transaction lock.
"""

from __future__ import annotations

import calendar
import contextlib
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from google.api_core import exceptions as google_exceptions
from record_fields import CLAIMED_AT, COMPLETED_AT, EXPIRE_AT, SCHEDULE_TIME
from run_store import (
    COMMIT_TIME,
    Budget,
    RecordExists,
    RunStore,
    StaleWrite,
    StoredRecord,
    store_deadline_for,
)
from scheduler_request import RunKey


class RunStatus(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class ClaimKind(StrEnum):
    CREATED = "created"
    TOOK_OVER_LEASE = "took_over_lease"  # the previous attempt's lease had expired
    RECLAIMED_EXPIRED = "reclaimed_expired"  # past expire_at: TTL deletion had not run yet


class JobResult(StrEnum):
    SUCCEEDED = "succeeded"
    TERMINAL_FAILURE = "terminal_failure"
    OVERLAP_SKIPPED = "overlap_skipped"  # another run of the job held its lock (policy skip)


# --- the ledger ----------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """Proof that this attempt owns the run until `lease_expires` (Firestore's clock)."""

    run_id: str
    attempt_id: str
    kind: ClaimKind
    update_time: datetime
    lease_expires: datetime

    @property
    def fence(self) -> int:
        """The claim's commit time in nanoseconds since the epoch: strictly larger for every
        later claim of the same run, even after a delete and re-create."""
        nanos = getattr(self.update_time, "nanosecond", self.update_time.microsecond * 1000)
        return calendar.timegm(self.update_time.utctimetuple()) * 1_000_000_000 + int(nanos)


class RunAlreadyCompleted(Exception):
    """The run finished earlier: the job must not run again."""

    def __init__(self, run_id: str, fields: Mapping[str, Any], seconds_left: float) -> None:
        super().__init__(f"run {run_id} is completed")
        self.run_id = run_id
        self.result = str(fields.get("result", JobResult.SUCCEEDED))
        self.error: str | None = fields.get("error")
        self.output_json: str | None = fields.get("output_json")
        # Until the record's retention ends (Firestore's clock): how long the answer stands.
        self.seconds_left = seconds_left


class RunInProgress(Exception):
    """Another attempt holds a live lease; it may still fail, so the caller should retry."""

    def __init__(self, run_id: str, retry_after_seconds: int, holder: str | None) -> None:
        super().__init__(f"run {run_id} is in progress (attempt {holder}), retry in {retry_after_seconds}s")
        self.run_id = run_id
        self.retry_after_seconds = retry_after_seconds
        self.holder = holder


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

    def __init__(self, claim: Claim) -> None:
        super().__init__(f"attempt {claim.attempt_id} no longer owns run {claim.run_id}, fence {claim.fence}")
        self.claim = claim


def in_progress_record(
    key: RunKey, attempt_id: str, now: datetime, *, lease: timedelta, retention: timedelta
) -> dict[str, Any]:
    """A claimed run's record. Every field is always present (None until it applies), so a
    takeover's update replaces a completed record's leftovers too. `now` (the instance's
    clock) only dates the TTL field; the lease is counted from the write's commit time."""
    return {
        "status": RunStatus.IN_PROGRESS.value,
        "attempt_id": attempt_id,
        "lease_seconds": lease.total_seconds(),
        EXPIRE_AT: now + retention,  # the TTL field; completion re-dates it on Firestore's clock
        "job_name": key.job_name,
        SCHEDULE_TIME: key.schedule_time,
        "project": key.project,
        "location": key.location,
        CLAIMED_AT: COMMIT_TIME,
        COMPLETED_AT: None,
        "result": None,
        "error": None,
        "output_json": None,
    }


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_attempt_id() -> str:
    return uuid.uuid4().hex


class RunLedger:
    """Claim/finish protocol over a RunStore. The injectable clock is the instance's wall
    clock, used only for the TTL field: tests skew it to show no decision depends on it."""

    # Each round ends in a won write, a decision, or a lost race to a concurrent writer;
    # losing this many races in a row means others are busy with the run, i.e. in progress.
    MAX_CLAIM_ROUNDS = 5

    def __init__(
        self,
        store: RunStore,
        *,
        lease: timedelta,
        retention: timedelta,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._store = store
        self._lease = lease
        self._retention = retention
        self._clock = clock
        self.deadline_seconds = store_deadline_for(lease).total_seconds()

    @property
    def lease(self) -> timedelta:
        return self._lease

    @property
    def retention(self) -> timedelta:
        return self._retention

    @property
    def clock(self) -> Callable[[], datetime]:
        return self._clock

    def claim(self, key: RunKey, attempt_id: str) -> Claim:
        """Own the run, or raise RunAlreadyCompleted / RunInProgress / ClaimTooLate (or a
        GoogleAPIError when Firestore does not answer within the deadline)."""
        run_id = key.run_id
        budget = Budget(self.deadline_seconds, f"claim of run {run_id}")
        created_at = time.monotonic()
        for _ in range(self.MAX_CLAIM_ROUNDS):
            record = in_progress_record(
                key, attempt_id, self._clock(), lease=self._lease, retention=self._retention
            )
            sent = created_at = time.monotonic()
            try:
                update_time = self._store.create(run_id, record, timeout=budget.left())
                return self._started(run_id, attempt_id, ClaimKind.CREATED, update_time, sent)
            except RecordExists:
                pass

            stored = self._store.get(run_id, timeout=budget.left())
            if stored is None:
                continue  # released between our create and our read: create again
            if stored.fields.get("attempt_id") == attempt_id:
                # Our own create committed but its response was lost and the client retried.
                return self._started(run_id, attempt_id, ClaimKind.CREATED, stored.update_time, created_at)
            kind = self._takeover_kind(run_id, stored)
            sent = time.monotonic()
            try:
                update_time = self._store.update(
                    run_id, record, if_updated_at=stored.update_time, timeout=budget.left()
                )
            except StaleWrite:
                continue  # someone else changed it first: look again
            return self._started(run_id, attempt_id, kind, update_time, sent)

        raise RunInProgress(run_id, 1, None)

    def _takeover_kind(self, run_id: str, stored: StoredRecord) -> ClaimKind:
        """Decide on Firestore's clock whether the record may be overwritten, or raise."""
        fields, now = stored.fields, stored.read_time
        if fields["status"] == RunStatus.COMPLETED:
            if fields[EXPIRE_AT] <= now:
                return ClaimKind.RECLAIMED_EXPIRED  # TTL deletion runs up to days late
            raise RunAlreadyCompleted(run_id, fields, (fields[EXPIRE_AT] - now).total_seconds())
        lease_expires = stored.update_time + timedelta(seconds=self._lease_of(fields))
        if lease_expires > now:
            seconds_left = (lease_expires - now).total_seconds()
            raise RunInProgress(run_id, max(1, math.ceil(seconds_left)), fields.get("attempt_id"))
        return ClaimKind.TOOK_OVER_LEASE

    def _lease_of(self, fields: Mapping[str, Any]) -> float:
        """The holder's own lease (its configuration may differ from ours mid-deploy)."""
        lease = fields.get("lease_seconds")
        return float(lease) if isinstance(lease, int | float) else self._lease.total_seconds()

    def _started(
        self, run_id: str, attempt_id: str, kind: ClaimKind, update_time: datetime, sent: float
    ) -> Claim:
        """The lease began at the commit, which happened after `sent`; when the answer took
        longer than the deadline, the lease may be gone: give the claim back unrun."""
        claim = Claim(run_id, attempt_id, kind, update_time, update_time + self._lease)
        waited = time.monotonic() - sent
        if waited > self.deadline_seconds:
            # Taken over meanwhile, or Firestore failing: either way the lease runs out.
            with contextlib.suppress(LeaseLost, google_exceptions.GoogleAPIError):
                self.release(claim)
            raise ClaimTooLate(run_id, waited, self.deadline_seconds)
        return claim

    def complete(
        self,
        claim: Claim,
        result: JobResult = JobResult.SUCCEEDED,
        error: str | None = None,
        output_json: str | None = None,
    ) -> None:
        """Mark the run completed, only if this attempt still owns it. The TTL field is
        re-dated from the claim's commit time, so retention is on Firestore's clock too."""
        fields = {
            "status": RunStatus.COMPLETED.value,
            COMPLETED_AT: COMMIT_TIME,
            EXPIRE_AT: claim.update_time + self._retention,
            "result": result.value,
            "error": error,
            "output_json": output_json,
        }
        budget = Budget(self.deadline_seconds, f"completion of run {claim.run_id}")
        try:
            self._store.update(claim.run_id, fields, if_updated_at=claim.update_time, timeout=budget.left())
        except StaleWrite:
            if not self._already_completed_by(claim, budget):
                raise LeaseLost(claim) from None

    def release(self, claim: Claim) -> None:
        """Delete the record after a retryable failure, so the next retry runs at once
        instead of waiting out the lease. Only the owner may release."""
        budget = Budget(self.deadline_seconds, f"release of run {claim.run_id}")
        try:
            self._store.delete(claim.run_id, if_updated_at=claim.update_time, timeout=budget.left())
        except StaleWrite:
            raise LeaseLost(claim) from None

    def _already_completed_by(self, claim: Claim, budget: Budget) -> bool:
        """After a lost response the client may retry a write that had committed; the
        record then shows our own completion, which is success, not a lost lease."""
        stored = self._store.get(claim.run_id, timeout=budget.left())
        return (
            stored is not None
            and stored.fields.get("attempt_id") == claim.attempt_id
            and stored.fields.get("status") == RunStatus.COMPLETED
        )
