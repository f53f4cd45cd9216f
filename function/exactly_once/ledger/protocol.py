"""The run ledger: claim a scheduled run, keep its lease, then complete or release it, once.

Every step is a single-document conditional write, never a transaction:

- claim:    create() the record; it fails if the record exists. The commit time of the
            winning write is the attempt's *fence*, and the moment its lease starts.
- takeover: an expired lease (or an expired record) is overwritten with a write conditioned
            on the update_time just read: compare-and-swap, so two retries cannot both win.
- renew:    while the job runs, the owner rewrites the record conditioned on its own last
            write; the lease starts again at that commit (delivery/heartbeat.py decides when).
- finish:   conditioned on the owner's last write, so only the current owner can complete
            or release the run; a stale owner gets LeaseLost.

Clock model: every lease decision is made on Firestore's clock. A lease runs from the commit
time (update_time) of the owner's last write for the `lease_seconds` it wrote; a reader judges
it against its read's read_time. An instance's own clock only feeds the TTL field of an
in-progress record, which nothing decides on. So instance clocks may be skewed by any amount.

Lost answers: the client library retries a write whose answer was lost, and the retry then
finds the record changed by the very write it repeats. Every step recognises its own earlier
write by `attempt_id` (which only the owner writes) instead of mistaking it for a rival's.

A first delivery costs exactly two writes (create + complete), plus one renewal per third of
a lease that the job runs. A duplicate costs a refused create and one read.
"""

from __future__ import annotations

import calendar
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as google_exceptions

from exactly_once.delivery.scheduler_request import RunKey
from exactly_once.ledger.fields import COMPLETED_AT, EXPIRE_AT, RENEWED_AT, TARGET, recorded_by_another_target
from exactly_once.ledger.records import (
    ClaimKind,
    ClaimTooLate,
    JobResult,
    LeaseLost,
    RunAlreadyCompleted,
    RunInProgress,
    RunStatus,
    WrongTarget,
    in_progress_record,
    lease_seconds_left,
    new_attempt_id,
    utc_now,
)
from exactly_once.ledger.store import (
    COMMIT_TIME,
    Budget,
    RecordExists,
    RunStore,
    StaleWrite,
    StoredRecord,
    store_deadline_for,
)

__all__ = [
    "Claim",
    "ClaimKind",
    "ClaimTooLate",
    "JobResult",
    "LeaseLost",
    "RunAlreadyCompleted",
    "RunInProgress",
    "RunLedger",
    "RunStatus",
    "WrongTarget",
    "new_attempt_id",
    "utc_now",
]


def fence_of(commit_time: datetime) -> int:
    """A commit time in nanoseconds since the epoch."""
    nanos = getattr(commit_time, "nanosecond", commit_time.microsecond * 1000)
    return calendar.timegm(commit_time.utctimetuple()) * 1_000_000_000 + int(nanos)


@dataclass(frozen=True)
class Claim:
    """Proof that this attempt owns the run until `lease_expires` (Firestore's clock)."""

    run_id: str
    attempt_id: str
    kind: ClaimKind
    # The claim's commit time in nanoseconds: strictly larger for every later claim of the
    # same run, even after a delete and re-create. Renewals keep it.
    fence: int
    # Commit time of this attempt's last write to the record (claim or renewal): what the
    # next conditional write of the owner must match.
    update_time: datetime
    lease_expires: datetime
    # time.monotonic() when that write was sent. It committed later, so on this instance's
    # clock the lease lasts at least until sent_at + lease: what the watchdog counts on.
    sent_at: float
    # SHA-256 (hex) of the body this attempt runs the job with, as recorded with the run.
    fingerprint: str = ""


class RunLedger:
    """Claim/renew/finish protocol over a RunStore. The injectable clock is the instance's
    wall clock, used only for the TTL field: tests skew it to show no decision depends on it."""

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

    @property
    def store(self) -> RunStore:
        return self._store

    def claim(self, key: RunKey, attempt_id: str, *, fingerprint: str = "", target: str = "") -> Claim:
        """Own the run, or raise RunAlreadyCompleted / RunInProgress / WrongTarget /
        ClaimTooLate (or a GoogleAPIError when Firestore does not answer within the deadline).
        `fingerprint` (of the body) and `target` (which function runs the job) are recorded."""
        run_id = key.run_id
        budget = Budget(self.deadline_seconds, f"claim of run {run_id}")
        created_at = time.monotonic()
        for _ in range(self.MAX_CLAIM_ROUNDS):
            record = in_progress_record(
                key,
                attempt_id,
                self._clock(),
                lease=self._lease,
                retention=self._retention,
                fingerprint=fingerprint,
                target=target,
            )
            sent = created_at = time.monotonic()
            try:
                update_time = self._store.create(run_id, record, timeout=budget.left())
                return self._started(run_id, attempt_id, ClaimKind.CREATED, update_time, sent, fingerprint)
            except RecordExists:
                pass

            stored = self._store.get(run_id, timeout=budget.left())
            if stored is None:
                continue  # released between our create and our read: create again
            if stored.fields.get("attempt_id") == attempt_id:
                # Our own create committed but its answer was lost and the client retried.
                return self._started(
                    run_id, attempt_id, ClaimKind.CREATED, stored.update_time, created_at, fingerprint
                )
            kind = self._takeover_kind(run_id, stored, target)
            sent = time.monotonic()
            try:
                update_time = self._store.update(
                    run_id, record, if_updated_at=stored.update_time, timeout=budget.left()
                )
            except StaleWrite:
                continue  # someone else changed it first: look again
            return self._started(run_id, attempt_id, kind, update_time, sent, fingerprint)

        raise RunInProgress(run_id, 1, None)

    def _takeover_kind(self, run_id: str, stored: StoredRecord, target: str) -> ClaimKind:
        """Decide on Firestore's clock whether the record may be overwritten, or raise."""
        fields, now = stored.fields, stored.read_time
        if recorded_by_another_target(fields, target):
            raise WrongTarget(run_id, fields[TARGET], target)
        if fields["status"] == RunStatus.COMPLETED:
            if fields[EXPIRE_AT] <= now:
                return ClaimKind.RECLAIMED_EXPIRED  # TTL deletion runs up to days late
            raise RunAlreadyCompleted(run_id, fields, (fields[EXPIRE_AT] - now).total_seconds())
        seconds_left = lease_seconds_left(stored, self._lease)
        if seconds_left > 0:
            raise RunInProgress(
                run_id, max(1, math.ceil(seconds_left)), fields.get("attempt_id"), fields.get("body_sha256")
            )
        return ClaimKind.TOOK_OVER_LEASE

    def _started(
        self,
        run_id: str,
        attempt_id: str,
        kind: ClaimKind,
        update_time: datetime,
        sent: float,
        fingerprint: str,
    ) -> Claim:
        """The lease began at the commit, which happened after `sent`; when the answer took
        longer than the deadline, the lease may be gone: give the claim back unrun."""
        claim = Claim(
            run_id,
            attempt_id,
            kind,
            fence_of(update_time),
            update_time,
            update_time + self._lease,
            sent,
            fingerprint,
        )
        waited = time.monotonic() - sent
        if waited > self.deadline_seconds:
            # Taken over meanwhile, or Firestore failing: either way the lease runs out.
            with contextlib.suppress(LeaseLost, google_exceptions.GoogleAPIError):
                self.release(claim)
            raise ClaimTooLate(run_id, waited, self.deadline_seconds)
        return claim

    def renew(self, claim: Claim, *, timeout: float) -> Claim:
        """Start the lease again at a new commit, only if this attempt still owns the run.
        Raises LeaseLost if another attempt took over, a GoogleAPIError if Firestore did not
        answer within `timeout`."""
        budget = Budget(timeout, f"lease renewal of run {claim.run_id}")
        sent = time.monotonic()
        update_time = self._write_as_owner(claim, {RENEWED_AT: COMMIT_TIME}, budget)
        return replace(claim, update_time=update_time, lease_expires=update_time + self._lease, sent_at=sent)

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
        self._write_as_owner(claim, fields, budget)

    def release(self, claim: Claim) -> None:
        """Delete the record after a retryable failure, so the next retry runs at once
        instead of waiting out the lease. Only the owner may release."""
        budget = Budget(self.deadline_seconds, f"release of run {claim.run_id}")
        update_time = claim.update_time
        for _ in range(self.MAX_CLAIM_ROUNDS):
            try:
                self._store.delete(claim.run_id, if_updated_at=update_time, timeout=budget.left())
                return
            except StaleWrite:
                stored = self._store.get(claim.run_id, timeout=budget.left())
                if stored is None:
                    return  # gone: our delete committed and its answer was lost
                if stored.fields.get("attempt_id") != claim.attempt_id:
                    raise LeaseLost(claim) from None
                update_time = stored.update_time  # a renewal of ours whose answer was lost
        raise LeaseLost(claim)

    def _write_as_owner(self, claim: Claim, fields: dict[str, Any], budget: Budget) -> datetime:
        """A conditional update of our own record. A refused precondition is either a rival
        (LeaseLost) or our own earlier write whose answer was lost: then the record still
        carries our attempt_id, and the write is repeated on its update_time."""
        update_time = claim.update_time
        for _ in range(self.MAX_CLAIM_ROUNDS):
            try:
                return self._store.update(
                    claim.run_id, fields, if_updated_at=update_time, timeout=budget.left()
                )
            except StaleWrite:
                stored = self._own_record(claim, budget)
                if stored is None:
                    raise LeaseLost(claim) from None
                if stored.fields.get("status") == RunStatus.COMPLETED:
                    if fields.get("status") == RunStatus.COMPLETED:
                        return stored.update_time  # our own completion, answered late
                    raise LeaseLost(claim) from None
                update_time = stored.update_time
        raise LeaseLost(claim)

    def _own_record(self, claim: Claim, budget: Budget) -> StoredRecord | None:
        """The record if it still belongs to this attempt, else None."""
        stored = self._store.get(claim.run_id, timeout=budget.left())
        if stored is None or stored.fields.get("attempt_id") != claim.attempt_id:
            return None
        return stored
