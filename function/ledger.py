"""The run ledger: claim a scheduled run, then complete or release it, exactly once.

Every step is a single-document conditional write, never a transaction:

- claim:    create() the record; it fails if the record exists. The commit time of the
            winning write is the attempt's *fence*.
- takeover: an expired lease (or an expired record) is overwritten with a write conditioned
            on the update_time just read: compare-and-swap, so two retries cannot both win.
- finish:   conditioned on the claim's update_time, so only the current owner can complete
            or release the run; a stale owner gets LeaseLost.

A first delivery costs exactly two writes (create + complete). A duplicate costs a failed
create and one read, and never contends on a transaction lock.
"""

from __future__ import annotations

import calendar
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, cast

from google.api_core import exceptions as google_exceptions
from google.cloud import firestore
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


# --- persistence interface -------------------------------------------------------------


class RecordExists(Exception):
    """create() found a record already there."""


class StaleWrite(Exception):
    """A conditional write found the record changed (or gone) since update_time was read."""


@dataclass(frozen=True)
class StoredRecord:
    fields: Mapping[str, Any]
    update_time: datetime


class RunStore(Protocol):
    """Four single-document operations; every write after create() is conditional."""

    def create(self, run_id: str, fields: Mapping[str, Any]) -> datetime: ...
    def get(self, run_id: str) -> StoredRecord | None: ...
    def update(self, run_id: str, fields: Mapping[str, Any], *, if_updated_at: datetime) -> datetime: ...
    def delete(self, run_id: str, *, if_updated_at: datetime) -> None: ...


class FirestoreRunStore:
    """RunStore on one Firestore collection. Returns commit times, which are the fences."""

    def __init__(self, client: firestore.Client, collection: str) -> None:
        self._client = client
        self._collection = client.collection(collection)

    def _document(self, run_id: str) -> firestore.DocumentReference:
        # The SDK's base classes type their results as "sync or awaitable"; this client is sync.
        return cast(firestore.DocumentReference, self._collection.document(run_id))

    def create(self, run_id: str, fields: Mapping[str, Any]) -> datetime:
        try:
            result = self._document(run_id).create(dict(fields))
        except google_exceptions.AlreadyExists:
            raise RecordExists(run_id) from None
        return result.update_time  # type: ignore[no-any-return]

    def get(self, run_id: str) -> StoredRecord | None:
        snapshot = self._document(run_id).get()
        if not snapshot.exists:
            return None
        return StoredRecord(fields=snapshot.to_dict() or {}, update_time=snapshot.update_time)

    def update(self, run_id: str, fields: Mapping[str, Any], *, if_updated_at: datetime) -> datetime:
        option = self._client.write_option(last_update_time=if_updated_at)
        try:
            result = self._document(run_id).update(dict(fields), option=option)
        except (google_exceptions.FailedPrecondition, google_exceptions.NotFound):
            raise StaleWrite(run_id) from None
        return result.update_time  # type: ignore[no-any-return]

    def delete(self, run_id: str, *, if_updated_at: datetime) -> None:
        option = self._client.write_option(last_update_time=if_updated_at)
        try:
            self._document(run_id).delete(option=option)
        except (google_exceptions.FailedPrecondition, google_exceptions.NotFound):
            raise StaleWrite(run_id) from None


# --- the ledger ----------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """Proof that this attempt owns the run until `lease_expires`."""

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

    def __init__(self, run_id: str, fields: Mapping[str, Any]) -> None:
        super().__init__(f"run {run_id} is completed")
        self.run_id = run_id
        self.result = str(fields.get("result", JobResult.SUCCEEDED))


class RunInProgress(Exception):
    """Another attempt holds a live lease; it may still fail, so the caller should retry."""

    def __init__(self, run_id: str, retry_after_seconds: int, holder: str | None) -> None:
        super().__init__(f"run {run_id} is in progress (attempt {holder}), retry in {retry_after_seconds}s")
        self.run_id = run_id
        self.retry_after_seconds = retry_after_seconds
        self.holder = holder


class LeaseLost(Exception):
    """Another attempt took the run over after this attempt's lease expired."""

    def __init__(self, claim: Claim) -> None:
        super().__init__(f"attempt {claim.attempt_id} no longer owns run {claim.run_id}, fence {claim.fence}")
        self.claim = claim


def in_progress_record(
    key: RunKey, attempt_id: str, now: datetime, *, lease: timedelta, retention: timedelta
) -> dict[str, Any]:
    """A claimed run's record. Every field is always present (None until it applies), so a
    takeover's update replaces a completed record's leftovers too."""
    return {
        "status": RunStatus.IN_PROGRESS.value,
        "attempt_id": attempt_id,
        "lease_expires": now + lease,
        "expire_at": now + retention,  # the TTL field
        "job_name": key.job_name,
        "schedule_time": key.schedule_time,
        "project": key.project,
        "location": key.location,
        "claimed_at": now,
        "completed_at": None,
        "result": None,
        "error": None,
    }


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_attempt_id() -> str:
    return uuid.uuid4().hex


class RunLedger:
    """Claim/finish protocol over a RunStore. The clock is injectable so that lease expiry
    can be tested without waiting for it."""

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

    def claim(self, key: RunKey, attempt_id: str) -> Claim:
        """Own the run, or raise RunAlreadyCompleted / RunInProgress."""
        run_id = key.run_id
        for _ in range(self.MAX_CLAIM_ROUNDS):
            now = self._clock()
            record = self._new_record(key, attempt_id, now)
            try:
                update_time = self._store.create(run_id, record)
                return self._claim(run_id, attempt_id, ClaimKind.CREATED, update_time, record)
            except RecordExists:
                pass

            stored = self._store.get(run_id)
            if stored is None:
                continue  # released between our create and our read: create again
            fields = stored.fields
            if fields.get("attempt_id") == attempt_id:
                # Our own create committed but its response was lost and the client retried.
                return self._claim(run_id, attempt_id, ClaimKind.CREATED, stored.update_time, fields)
            if fields["expire_at"] <= now:
                kind = ClaimKind.RECLAIMED_EXPIRED
            elif fields["status"] == RunStatus.COMPLETED:
                raise RunAlreadyCompleted(run_id, fields)
            elif fields["lease_expires"] > now:
                seconds_left = (fields["lease_expires"] - now).total_seconds()
                raise RunInProgress(run_id, max(1, math.ceil(seconds_left)), fields.get("attempt_id"))
            else:
                kind = ClaimKind.TOOK_OVER_LEASE

            try:
                update_time = self._store.update(run_id, record, if_updated_at=stored.update_time)
            except StaleWrite:
                continue  # someone else changed it first: look again
            return self._claim(run_id, attempt_id, kind, update_time, record)

        raise RunInProgress(run_id, 1, None)

    def complete(
        self, claim: Claim, result: JobResult = JobResult.SUCCEEDED, error: str | None = None
    ) -> None:
        """Mark the run completed, only if this attempt still owns it."""
        fields = {
            "status": RunStatus.COMPLETED.value,
            "completed_at": self._clock(),
            "result": result.value,
            "error": error,
        }
        try:
            self._store.update(claim.run_id, fields, if_updated_at=claim.update_time)
        except StaleWrite:
            if not self._already_completed_by(claim):
                raise LeaseLost(claim) from None

    def release(self, claim: Claim) -> None:
        """Delete the record after a retryable failure, so the next retry runs at once
        instead of waiting out the lease. Only the owner may release."""
        try:
            self._store.delete(claim.run_id, if_updated_at=claim.update_time)
        except StaleWrite:
            raise LeaseLost(claim) from None

    def _already_completed_by(self, claim: Claim) -> bool:
        """After a lost response the client may retry a write that had committed; the
        record then shows our own completion, which is success, not a lost lease."""
        stored = self._store.get(claim.run_id)
        return (
            stored is not None
            and stored.fields.get("attempt_id") == claim.attempt_id
            and stored.fields.get("status") == RunStatus.COMPLETED
        )

    def _new_record(self, key: RunKey, attempt_id: str, now: datetime) -> dict[str, Any]:
        return in_progress_record(key, attempt_id, now, lease=self._lease, retention=self._retention)

    @staticmethod
    def _claim(
        run_id: str, attempt_id: str, kind: ClaimKind, update_time: datetime, record: Mapping[str, Any]
    ) -> Claim:
        return Claim(run_id, attempt_id, kind, update_time, record["lease_expires"])
