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

What each write writes, and how a record read back is judged, is the lifecycle's
(lifecycle.py): this module only sends the writes and turns its verdicts into answers.

A first delivery costs exactly two writes (create + complete), plus one renewal per third of
a lease that the job runs. A duplicate costs a refused create and one read.
"""

from __future__ import annotations

import calendar
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as google_exceptions

from exactly_once.ledger import lifecycle
from exactly_once.ledger.fields import CHECKPOINT
from exactly_once.ledger.lifecycle import AfterRefusal, ClaimKind, Event, JobResult, StoredRecord
from exactly_once.ledger.records import (
    ClaimTooLate,
    LeaseLost,
    RunAlreadyCompleted,
    RunInProgress,
    WritesRefused,
    WrongTarget,
    in_progress_record,
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
    store_deadline_for,
)
from exactly_once.ledger.unheard_claims import AbandonedClaims, SentClaim
from exactly_once.ledger.writes import StagedWrite
from exactly_once.run_key import RunKey

__all__ = [
    "Claim",
    "ClaimKind",
    "ClaimTooLate",
    "JobResult",
    "LeaseLost",
    "RunAlreadyCompleted",
    "RunInProgress",
    "RunLedger",
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
    # The instance's monotonic clock when that write was sent; for a claim, when the first of
    # its writes that may have committed was sent (one whose answer was lost included). It
    # committed later, so on this instance's clock the lease lasts at least until
    # sent_at + lease: what the watchdog and the backstop count on.
    sent_at: float
    # SHA-256 (hex) of the body this attempt runs the job with, as recorded with the run.
    fingerprint: str = ""
    # The checkpoint (JSON text) the run held when this attempt claimed it, from an earlier
    # attempt that died or failed: None for a first attempt. A give-back puts it back.
    checkpoint_json: str | None = None
    # The claim's commit time (Firestore's clock): the run's "now" that no instance clock skews.
    claimed_at: datetime | None = None
    # The ScheduleTime of the run claimed: its completed record is kept at least retention past
    # it, however early the claim (lifecycle.retained_until).
    schedule_time: datetime | None = None


class RunLedger:
    """Claim/renew/finish protocol over a RunStore. The injectable clock is the instance's
    wall clock, used only for the TTL field: tests skew it to show no decision depends on it.
    `monotonic` is the instance's time.monotonic (the store deadline, the lease's send times),
    injectable so a test can make a call slow without waiting for it."""

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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._lease = lease
        self._retention = retention
        self._clock = clock
        self._monotonic = monotonic
        self.deadline_seconds = store_deadline_for(lease).total_seconds()
        self._abandoned = AbandonedClaims()

    @property
    def lease(self) -> timedelta:
        return self._lease

    @property
    def retention(self) -> timedelta:
        return self._retention

    def monotonic(self) -> float:
        """The clock `Claim.sent_at` is on (time.monotonic, or a test's)."""
        return self._monotonic()

    @property
    def clock(self) -> Callable[[], datetime]:
        return self._clock

    @property
    def store(self) -> RunStore:
        return self._store

    def _budget(self, seconds: float, what: str) -> Budget:
        return Budget(seconds, what, self._monotonic)

    def claim(self, key: RunKey, attempt_id: str, *, fingerprint: str = "", target: str = "") -> Claim:
        """Own the run, or raise RunAlreadyCompleted / RunInProgress / WrongTarget /
        ClaimTooLate (or a GoogleAPIError when Firestore does not answer within the deadline).
        `fingerprint` (of the body) and `target` (which function runs the job) are recorded.

        The claim's lease clock starts when the first write of it that may have committed was
        sent: a write whose answer was lost committed some time after it was sent, and every
        later round (the retry refused, the record read and found to be ours) only adds to
        how much of the lease is gone."""
        run_id = key.run_id
        budget = self._budget(self.deadline_seconds, f"claim of run {run_id}")
        began = self._monotonic()
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
                writing = creating = SentClaim(ClaimKind.CREATED, self._monotonic())
                try:
                    update_time = self._store.create(run_id, record, timeout=budget.left())
                except RecordExists as exists:
                    unheard = SentClaim.merge(unheard, creating if exists.unheard else None)
                    writing = None
                else:
                    writing = None
                    return self._started(
                        key,
                        attempt_id,
                        ClaimKind.CREATED,
                        update_time,
                        creating.since(unheard),
                        fingerprint,
                        None,
                    )

                stored = self._store.get(run_id, timeout=budget.left())
                if stored is None:
                    continue  # released between our create and our read: create again
                if lifecycle.is_owned_by(stored, attempt_id):
                    # Our own write committed but its answer was lost and the retry was refused.
                    kind = lifecycle.own_claim_kind(stored, unheard.kind if unheard is not None else None)
                    sent = unheard.sent_at if unheard is not None else began
                    inherited = lifecycle.inherited_checkpoint(stored)
                    return self._started(
                        key, attempt_id, kind, stored.update_time, sent, fingerprint, inherited
                    )
                verdict = lifecycle.on_claim(stored, target=target, default_lease=self._lease)
                if abandoned is not None and abandoned.holds(stored):
                    # An attempt of this instance that gave up on its claim unanswered wrote it;
                    # it never ran the job, so the run is this attempt's to continue at once.
                    verdict = lifecycle.TakeOver(abandoned.kind, lifecycle.inherited_checkpoint(stored))
                if not isinstance(verdict, lifecycle.TakeOver):
                    raise self._refusal(run_id, verdict, stored, target)
                record[CHECKPOINT] = verdict.checkpoint_json
                writing = taking = SentClaim(verdict.kind, self._monotonic())
                try:
                    update_time = self._store.update(
                        run_id, record, if_updated_at=stored.update_time, timeout=budget.left()
                    )
                except StaleWrite as stale:
                    unheard = SentClaim.merge(unheard, taking if stale.unheard else None)
                    writing = None
                    continue  # someone else changed it first, or our own try did: look again
                writing = None
                return self._started(
                    key,
                    attempt_id,
                    verdict.kind,
                    update_time,
                    taking.since(unheard),
                    fingerprint,
                    verdict.checkpoint_json,
                )
            raise RunInProgress(run_id, 1, None)
        except google_exceptions.GoogleAPIError:
            # A write of ours may hold the record now: the next claim of the run from this
            # instance recognises it instead of waiting out its lease.
            self._abandoned.put(run_id, attempt_id, SentClaim.merge(unheard, writing))
            raise

    @staticmethod
    def _refusal(
        run_id: str, verdict: lifecycle.ClaimVerdict, stored: StoredRecord, target: str
    ) -> Exception:
        """The exception a delivery is refused with, for a verdict that is not a takeover."""
        if isinstance(verdict, lifecycle.OtherTarget):
            return WrongTarget(run_id, verdict.recorded, target)
        if isinstance(verdict, lifecycle.Finished):
            return RunAlreadyCompleted(run_id, verdict, stored.read_time)
        assert isinstance(verdict, lifecycle.Held)
        return RunInProgress(
            run_id,
            verdict.retry_after_seconds,
            verdict.holder,
            verdict.fingerprint,
            read_time=stored.read_time,
        )

    def _started(
        self,
        key: RunKey,
        attempt_id: str,
        kind: ClaimKind,
        update_time: datetime,
        sent: float,
        fingerprint: str,
        checkpoint_json: str | None,
    ) -> Claim:
        """The lease began at the commit, which happened after `sent`; when the answer took
        longer than the deadline, the lease may be gone: give the claim back unrun, with the
        checkpoint it inherited."""
        run_id = key.run_id
        claim = Claim(
            run_id,
            attempt_id,
            kind,
            fence_of(update_time),
            update_time,
            update_time + self._lease,
            sent,
            fingerprint,
            checkpoint_json,
            claimed_at=update_time,
            schedule_time=key.schedule_time,
        )
        waited = self._monotonic() - sent
        if waited > self.deadline_seconds:
            # Taken over meanwhile, or Firestore failing: either way the lease runs out.
            with contextlib.suppress(LeaseLost, google_exceptions.GoogleAPIError):
                self.give_back(claim)
            raise ClaimTooLate(run_id, waited, self.deadline_seconds)
        return claim

    def renew(self, claim: Claim, *, timeout: float, checkpoint_json: str | None = None) -> Claim:
        """Start the lease again at a new commit, only if this attempt still owns the run.
        Raises LeaseLost if another attempt took over, a GoogleAPIError if Firestore did not
        answer within `timeout`. A `checkpoint_json` rides in the same write: durable, for an
        attempt that takes the run over, once the renewal commits."""
        budget = self._budget(timeout, f"lease renewal of run {claim.run_id}")
        sent = self._monotonic()
        fields = lifecycle.renewal_fields(checkpoint_json, COMMIT_TIME)
        update_time = self._finish_as_owner(Event.RENEW, claim, fields, budget)
        assert update_time is not None
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
        commit: applied if and only if the completion is. `record_fields` are what the job
        reported about its run (the downstream work a proxy started), written in the same write.
        A run skipped (late, or paused) is completed with its JobResult.SKIPPED_* value."""
        fields = lifecycle.completion_fields(
            result,
            error=error,
            output_json=output_json,
            expire_at=lifecycle.retained_until(claim.update_time, claim.schedule_time, self._retention),
            commit_time=COMMIT_TIME,
            reported=record_fields,
        )
        event = lifecycle.completion_event(result)
        self._finish_as_owner(event, claim, fields, self._ending_budget(claim, event), also=also)

    def release(
        self, claim: Claim, *, checkpoint_json: str | None = None, also: Sequence[StagedWrite] = ()
    ) -> None:
        """Give the run back after a retryable failure, so the next retry runs at once instead
        of waiting out the lease, with `also` in the same commit. `checkpoint_json` is the
        attempt's latest (its own, else the one it inherited): kept in a `released` record, or
        the record deleted when there is none. Only the owner may release."""
        fields, budget = lifecycle.release_fields(checkpoint_json), self._ending_budget(claim, Event.RELEASE)
        self._finish_as_owner(Event.RELEASE, claim, fields, budget, also=also)

    def give_back(self, claim: Claim) -> None:
        """Return a claim whose job never ran (confirmed too late, claimed under the wrong
        identity, refused by the job's lock...): the run is as the claim found it, its inherited
        checkpoint put back, for the next claim to own at once. Nothing ran, so nothing is lost
        when this fails: it waits the store deadline only, and the run then its lease."""
        budget = self._budget(self.deadline_seconds, f"{Event.GIVE_BACK.value} of run {claim.run_id}")
        self._finish_as_owner(Event.GIVE_BACK, claim, lifecycle.release_fields(claim.checkpoint_json), budget)

    def _finish_as_owner(
        self,
        event: Event,
        claim: Claim,
        fields: dict[str, Any] | None,
        budget: Budget,
        *,
        also: Sequence[StagedWrite] = (),
    ) -> datetime | None:
        """Send the owner's conditional write of `event` (`fields` None: a delete), and judge a
        refusal with the lifecycle from the record read back: our own earlier write whose
        answer was lost is done; a renewal of ours answered late is written over; anything
        else is another attempt's lease (LeaseLost) or a refused write riding along
        (WritesRefused). Returns the write's commit time (None for a delete, or a write found
        already done)."""
        update_time = claim.update_time
        for _ in range(self.MAX_CLAIM_ROUNDS):
            try:
                if fields is None:
                    self._store.delete(
                        claim.run_id, if_updated_at=update_time, timeout=budget.left(), also=also
                    )
                    return None
                return self._store.update(
                    claim.run_id, fields, if_updated_at=update_time, timeout=budget.left(), also=also
                )
            except StaleWrite as refused:
                found = self._store.get(claim.run_id, timeout=self._classifying(claim).left())
                after = lifecycle.after_refusal(
                    event,
                    attempt_id=claim.attempt_id,
                    lease_ends=claim.lease_expires,
                    sent_on=update_time,
                    unheard=refused.unheard,
                    others_refused=refused.refusal is not None,
                    found=found,
                )
                if after is AfterRefusal.COMMITTED:
                    return (
                        found.update_time
                        if found is not None and lifecycle.is_owned_by(found, claim.attempt_id)
                        else None
                    )
                if after is AfterRefusal.OTHERS_REFUSED:
                    assert refused.refusal is not None
                    raise WritesRefused(claim, refused.refusal) from None
                if after is AfterRefusal.LOST:
                    raise LeaseLost(claim) from None
                assert found is not None
                update_time = found.update_time  # a renewal of ours whose answer was lost
        raise LeaseLost(claim)

    def _ending_budget(self, claim: Claim, event: Event) -> Budget:
        """The budget of the write that ends a run: the store deadline, or longer, until the
        lease ends (a lease after `claim.sent_at`, the claim's or last renewal's send time).
        Once a job has run (or a skip was decided), giving up on this write leaves the run to a
        retry that takes it over and runs the job again; while the lease lasts, no retry can,
        and the write is conditioned on the claim, so waiting for a slow Firestore is never
        unsafe, only the one way to keep the job from running twice."""
        until_lease_ends = claim.sent_at + self._lease.total_seconds() - self._monotonic()
        seconds = max(self.deadline_seconds, until_lease_ends)
        return self._budget(seconds, f"{event.value} of run {claim.run_id}")

    def _classifying(self, claim: Claim) -> Budget:
        """A budget of its own for the read that tells a refused write of ours from a rival's:
        the refusal has been answered, so Firestore is there, but the operation's budget may
        be spent (a process frozen mid-write, thawed after a retry took over), and "another
        attempt owns the run" must not be answered as "Firestore failed"."""
        return self._budget(self.deadline_seconds * ATTEMPT_SHARE, f"reading back run {claim.run_id}")
