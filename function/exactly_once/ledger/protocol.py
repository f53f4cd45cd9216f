"""The run ledger: claim a scheduled run, keep its lease, then complete or release it, once.

Every step is a single-document conditional write, never a transaction:

- claim:    create() the record; it fails if the record exists. The commit time of the
            winning write is the attempt's *fence*, and the moment its lease starts.
- takeover: an expired lease (or an expired record) is overwritten with a write conditioned
            on the update_time just read: compare-and-swap, so two retries cannot both win.
- renew:    while the job runs, the owner rewrites the record conditioned on its own last
            write; the lease starts again at that commit (delivery/heartbeat.py decides when).
- finish:   conditioned on the owner's last write, so only the current owner can complete
            or release the run; a stale owner gets LeaseLost. Writes to other documents may
            ride in the same commit (ledger/writes.py): applied with it, or not at all.

Clock model: every lease decision is made on Firestore's clock. A lease runs from the commit
time (update_time) of the owner's last write for the `lease_seconds` it wrote; a reader judges
it against its read's read_time. An instance's own clock only feeds the TTL field of an
in-progress record, which nothing decides on. So instance clocks may be skewed by any amount.

Lost answers: the client library retries a write whose answer was lost, and the retry then
finds the record changed by the very write it repeats. Every step recognises its own earlier
write by `attempt_id` (which only the owner writes) instead of mistaking it for a rival's.
A claim found that way keeps the send time of that first write, on which its lease clock
runs on this instance, and the kind of claim the write made; a refused write is classified
with a read on a budget of its own. A claim given up while a write of it may have committed
is remembered, and the instance's next claim of the run continues from it at once.

A first delivery costs exactly two writes (create + complete), plus one renewal per third of
a lease that the job runs. A duplicate costs a refused create and one read.
"""

from __future__ import annotations

import calendar
import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as google_exceptions

from exactly_once.delivery.scheduler_request import RunKey
from exactly_once.ledger.fields import (
    CHECKPOINT,
    COMPLETED_AT,
    EXPIRE_AT,
    RENEWED_AT,
    TARGET,
    recorded_by_another_target,
)
from exactly_once.ledger.records import (
    ClaimKind,
    ClaimTooLate,
    JobResult,
    LeaseLost,
    RunAlreadyCompleted,
    RunInProgress,
    RunStatus,
    WritesRefused,
    WrongTarget,
    in_progress_record,
    lease_seconds_left,
    new_attempt_id,
    utc_now,
)
from exactly_once.ledger.store import (
    ATTEMPT_SHARE,
    COMMIT_TIME,
    Budget,
    RecordExists,
    RunStore,
    StaleWrite,
    StoredRecord,
    store_deadline_for,
)
from exactly_once.ledger.unheard_claims import AbandonedClaims, SentClaim, own_claim_kind
from exactly_once.ledger.writes import StagedWrite

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
    "WritesRefused",
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
    # time.monotonic() when that write was sent; for a claim, when the first of its writes
    # that may have committed was sent (one whose answer was lost included). It committed
    # later, so on this instance's clock the lease lasts at least until sent_at + lease:
    # what the watchdog and the backstop count on.
    sent_at: float
    # SHA-256 (hex) of the body this attempt runs the job with, as recorded with the run.
    fingerprint: str = ""
    # The checkpoint (JSON text) the run held when this attempt claimed it, from an earlier
    # attempt that died or failed: None for a first attempt.
    checkpoint_json: str | None = None


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
        self._abandoned = AbandonedClaims()

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
        `fingerprint` (of the body) and `target` (which function runs the job) are recorded.

        The claim's lease clock starts when the first write of it that may have committed was
        sent: a write whose answer was lost committed some time after it was sent, and every
        later round (the retry refused, the record read and found to be ours) only adds to
        how much of the lease is gone."""
        run_id = key.run_id
        budget = Budget(self.deadline_seconds, f"claim of run {run_id}")
        began = time.monotonic()
        abandoned = self._abandoned.take(run_id, began - self._lease.total_seconds())
        unheard: SentClaim | None = None  # the claim's writes that may have committed unheard of
        writing: SentClaim | None = None  # the write on the wire, while it is
        try:
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
                writing = creating = SentClaim(ClaimKind.CREATED, time.monotonic())
                try:
                    update_time = self._store.create(run_id, record, timeout=budget.left())
                except RecordExists as exists:
                    unheard = SentClaim.merge(unheard, creating if exists.unheard else None)
                    writing = None
                else:
                    sent = creating.since(unheard)
                    writing = None
                    return self._started(
                        run_id, attempt_id, ClaimKind.CREATED, update_time, sent, fingerprint, None
                    )

                stored = self._store.get(run_id, timeout=budget.left())
                if stored is None:
                    continue  # released between our create and our read: create again
                holder = stored.fields.get("attempt_id")
                if holder == attempt_id:
                    # Our own write committed but its answer was lost and the retry was refused.
                    kind = own_claim_kind(stored, unheard)
                    sent = unheard.sent_at if unheard is not None else began
                    inherited = stored.fields.get(CHECKPOINT)
                    return self._started(
                        run_id, attempt_id, kind, stored.update_time, sent, fingerprint, inherited
                    )
                if abandoned is not None and abandoned.holds(stored):
                    # An attempt of this instance that gave up on its claim unanswered wrote it;
                    # it never ran the job, so the run is this attempt's to continue at once.
                    kind = abandoned.kind
                else:
                    kind = self._takeover_kind(run_id, stored, target)
                # A run that never completed keeps its checkpoint for the attempt taking it over.
                inherited = (
                    None
                    if stored.fields.get("status") == RunStatus.COMPLETED
                    else stored.fields.get(CHECKPOINT)
                )
                record[CHECKPOINT] = inherited
                writing = taking = SentClaim(kind, time.monotonic())
                try:
                    update_time = self._store.update(
                        run_id, record, if_updated_at=stored.update_time, timeout=budget.left()
                    )
                except StaleWrite as stale:
                    unheard = SentClaim.merge(unheard, taking if stale.unheard else None)
                    writing = None
                    continue  # someone else changed it first, or our own try did: look again
                sent = taking.since(unheard)
                writing = None
                return self._started(run_id, attempt_id, kind, update_time, sent, fingerprint, inherited)
            raise RunInProgress(run_id, 1, None)
        except google_exceptions.GoogleAPIError:
            # A write of ours may hold the record now: the next claim of the run from this
            # instance recognises it instead of waiting out its lease.
            self._abandoned.put(run_id, attempt_id, SentClaim.merge(unheard, writing))
            raise

    def _takeover_kind(self, run_id: str, stored: StoredRecord, target: str) -> ClaimKind:
        """Decide on Firestore's clock whether the record may be overwritten, or raise."""
        fields, now = stored.fields, stored.read_time
        if recorded_by_another_target(fields, target):
            raise WrongTarget(run_id, fields[TARGET], target)
        if fields["status"] == RunStatus.RELEASED:
            return ClaimKind.RECLAIMED_RELEASED  # given back by its owner: nobody holds it
        if fields["status"] == RunStatus.COMPLETED:
            if fields[EXPIRE_AT] <= now:
                return ClaimKind.RECLAIMED_EXPIRED  # TTL deletion runs up to days late
            raise RunAlreadyCompleted(run_id, fields, (fields[EXPIRE_AT] - now).total_seconds(), now)
        seconds_left = lease_seconds_left(stored, self._lease)
        if seconds_left > 0:
            raise RunInProgress(
                run_id,
                max(1, math.ceil(seconds_left)),
                fields.get("attempt_id"),
                fields.get("body_sha256"),
                read_time=now,
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
        checkpoint_json: str | None,
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
            checkpoint_json if isinstance(checkpoint_json, str) else None,
        )
        waited = time.monotonic() - sent
        if waited > self.deadline_seconds:
            # Taken over meanwhile, or Firestore failing: either way the lease runs out.
            with contextlib.suppress(LeaseLost, google_exceptions.GoogleAPIError):
                self.release(claim)
            raise ClaimTooLate(run_id, waited, self.deadline_seconds)
        return claim

    def renew(self, claim: Claim, *, timeout: float, checkpoint_json: str | None = None) -> Claim:
        """Start the lease again at a new commit, only if this attempt still owns the run.
        Raises LeaseLost if another attempt took over, a GoogleAPIError if Firestore did not
        answer within `timeout`. A `checkpoint_json` rides in the same write: durable, for an
        attempt that takes the run over, once the renewal commits."""
        budget = Budget(timeout, f"lease renewal of run {claim.run_id}")
        sent = time.monotonic()
        fields: dict[str, Any] = {RENEWED_AT: COMMIT_TIME}
        if checkpoint_json is not None:
            fields[CHECKPOINT] = checkpoint_json
        update_time = self._write_as_owner(claim, fields, budget)
        return replace(claim, update_time=update_time, lease_expires=update_time + self._lease, sent_at=sent)

    def complete(
        self,
        claim: Claim,
        result: JobResult = JobResult.SUCCEEDED,
        error: str | None = None,
        output_json: str | None = None,
        *,
        also: Sequence[StagedWrite] = (),
        record_fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Mark the run completed, only if this attempt still owns it, with `also` in the same
        commit: applied if and only if the completion is. The TTL field is re-dated from the
        claim's commit time, so retention is on Firestore's clock too. `record_fields` are
        what the job reported about its run (the downstream work a proxy started), written
        in the same write."""
        fields = {
            **(record_fields or {}),
            "status": RunStatus.COMPLETED.value,
            COMPLETED_AT: COMMIT_TIME,
            EXPIRE_AT: claim.update_time + self._retention,
            "result": result.value,
            "error": error,
            "output_json": output_json,
            CHECKPOINT: None,  # a completed run resumes nothing
        }
        budget = Budget(self.deadline_seconds, f"completion of run {claim.run_id}")
        self._write_as_owner(claim, fields, budget, also=also)

    def release(
        self, claim: Claim, *, checkpoint_json: str | None = None, also: Sequence[StagedWrite] = ()
    ) -> None:
        """Delete the record after a retryable failure, so the next retry runs at once
        instead of waiting out the lease, with `also` in the same commit. Only the owner may
        release.

        With a checkpoint to keep, the record is rewritten as released instead, the
        checkpoint in the same write: a claim takes a released record over at once, as it
        would create a deleted one, and inherits the checkpoint. The same one write either
        way; the checkpoint-free path is unchanged."""
        budget = Budget(self.deadline_seconds, f"release of run {claim.run_id}")
        if checkpoint_json is not None:
            fields = {"status": RunStatus.RELEASED.value, CHECKPOINT: checkpoint_json}
            self._write_as_owner(claim, fields, budget, also=also)
            return
        update_time = claim.update_time
        for _ in range(self.MAX_CLAIM_ROUNDS):
            try:
                self._store.delete(claim.run_id, if_updated_at=update_time, timeout=budget.left(), also=also)
                return
            except StaleWrite as refused:
                stored = self._store.get(claim.run_id, timeout=self._classifying(claim).left())
                if stored is None:
                    return  # gone: our delete committed and its answer was lost
                if stored.fields.get("attempt_id") != claim.attempt_id:
                    raise LeaseLost(claim) from None
                _raise_if_others_refused(claim, refused, stored, update_time)
                update_time = stored.update_time  # a renewal of ours whose answer was lost
        raise LeaseLost(claim)

    def _write_as_owner(
        self, claim: Claim, fields: dict[str, Any], budget: Budget, *, also: Sequence[StagedWrite] = ()
    ) -> datetime:
        """A conditional update of our own record. A refused precondition is either a rival
        (LeaseLost) or our own earlier write whose answer was lost: then the record still
        carries our attempt_id, and the write is repeated on its update_time."""
        update_time = claim.update_time
        for _ in range(self.MAX_CLAIM_ROUNDS):
            try:
                return self._store.update(
                    claim.run_id, fields, if_updated_at=update_time, timeout=budget.left(), also=also
                )
            except StaleWrite as refused:
                stored = self._own_record(claim)
                if stored is None:
                    raise LeaseLost(claim) from None
                _raise_if_others_refused(claim, refused, stored, update_time)
                if stored.fields.get("status") == RunStatus.COMPLETED:
                    if fields.get("status") == RunStatus.COMPLETED:
                        return stored.update_time  # our own completion, answered late
                    raise LeaseLost(claim) from None
                if stored.fields.get("status") == RunStatus.RELEASED:
                    if fields.get("status") == RunStatus.RELEASED:
                        return stored.update_time  # our own release, answered late
                    raise LeaseLost(claim) from None
                update_time = stored.update_time
        raise LeaseLost(claim)

    def _own_record(self, claim: Claim) -> StoredRecord | None:
        """The record if it still belongs to this attempt, else None."""
        stored = self._store.get(claim.run_id, timeout=self._classifying(claim).left())
        if stored is None or stored.fields.get("attempt_id") != claim.attempt_id:
            return None
        return stored

    def _classifying(self, claim: Claim) -> Budget:
        """A budget of its own for the read that tells a refused write of ours from a rival's:
        the refusal has been answered, so Firestore is there, but the operation's budget may
        be spent (a process frozen mid-write, thawed after a retry took over), and "another
        attempt owns the run" must not be answered as "Firestore failed"."""
        return Budget(self.deadline_seconds * ATTEMPT_SHARE, f"reading back run {claim.run_id}")


def _raise_if_others_refused(
    claim: Claim, refused: StaleWrite, stored: StoredRecord, sent_on: datetime
) -> None:
    """A refused commit that carried other writes, while our record is still exactly as the
    write's precondition expected: the record's write was not what Firestore refused, one of
    the others was (and no retry of the same commit can succeed)."""
    if refused.refusal is not None and stored.update_time == sent_on:
        raise WritesRefused(claim, refused.refusal)
