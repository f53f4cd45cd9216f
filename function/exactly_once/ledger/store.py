"""Where run records live: a four-method persistence interface and its Firestore version.

Every call takes an explicit deadline, retries included: the client library's defaults (up
to 60 s of retries) would outlive a lease and keep a delivery waiting long past any attempt
deadline while Firestore is unreachable. The retries are this module's own loop
(`with_retries`): each RPC is sent with the library's retry switched off and a timeout of its
own, so what a hung first call leaves for its retry is decided here, in plain sight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, cast

import grpc
from google.api_core import exceptions as google_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.bulk_batch import BulkWriteBatch

from exactly_once.ledger.lifecycle import StoredRecord as StoredRecord  # what get() returns
from exactly_once.ledger.writes import StagedWrite, add_to_batch

# Written in place of a timestamp, the commit time of the write (a server-side transform:
# no extra RPC). What an operator reads as claimed_at / completed_at is Firestore's clock.
COMMIT_TIME: Any = firestore.SERVER_TIMESTAMP

# A ledger operation (claim, complete, release) may wait this long for Firestore, retries
# included, and at most half the lease: a claim confirmed later than that is given back
# unrun (ledger.ClaimTooLate), since too little of its lease may be left to renew it in time.
MAX_STORE_DEADLINE_SECONDS = 10.0
# One RPC may take this share of a call's deadline, and a retry is sent only while a whole
# share is left. A third leaves room for one retry after a first attempt that hangs until its
# timeout (a half would leave less than a share once the first attempt gives up, so a slow
# first call would never be retried).
ATTEMPT_SHARE = 1 / 3
# The pause before the first retry, doubled after each failure up to the maximum.
FIRST_RETRY_PAUSE_SECONDS = 0.05
MAX_RETRY_PAUSE_SECONDS = 1.0
# A BatchWrite answers each write's outcome as a google.rpc.Status code (an int).
_OK = grpc.StatusCode.OK.value[0]
_ALREADY_EXISTS = grpc.StatusCode.ALREADY_EXISTS.value[0]
# Retried: the failures that mean "Firestore did not answer", never a refused write.
TRANSIENT_ERRORS: tuple[type[google_exceptions.GoogleAPIError], ...] = (
    google_exceptions.ServiceUnavailable,
    google_exceptions.DeadlineExceeded,
    google_exceptions.InternalServerError,
    google_exceptions.TooManyRequests,
)

T = TypeVar("T")


def store_deadline_for(lease: timedelta) -> timedelta:
    return timedelta(seconds=min(MAX_STORE_DEADLINE_SECONDS, lease.total_seconds() / 2))


class Budget:
    """A monotonic deadline shared by the calls of one ledger operation. `monotonic` is the
    instance's time.monotonic, injectable so a test can make a call slow without waiting."""

    def __init__(self, seconds: float, what: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._what = what
        self._monotonic = monotonic
        self._ends = monotonic() + seconds

    def left(self) -> float:
        """Seconds left for the next call; DeadlineExceeded (a store error) when none are."""
        left = self._ends - self._monotonic()
        if left <= 0:
            message = f"{self._what}: Firestore took over {self.seconds:g}s"
            raise google_exceptions.DeadlineExceeded(message)  # type: ignore[no-untyped-call]
        return left


class RecordExists(Exception):
    """create() found a record already there. `unheard`: an earlier try of this very create
    went unanswered, so the record found may be its own."""

    def __init__(self, run_id: str, *, unheard: bool = False) -> None:
        super().__init__(run_id)
        self.unheard = unheard


class StaleWrite(Exception):
    """A conditional write found the record changed (or gone) since update_time was read.
    `unheard`: an earlier try of this very write went unanswered, so what changed the record
    may be that try, committed. `refusal`: Firestore's words, for a commit that carried other
    writes too, since then one of those may be what was refused (a create of a document that
    exists, an update of one that does not); the caller tells which by reading the record."""

    def __init__(self, run_id: str, *, unheard: bool = False, refusal: str | None = None) -> None:
        super().__init__(run_id)
        self.unheard = unheard
        self.refusal = refusal


class Tries:
    """What with_retries saw of one call: whether any try of it went unanswered (a try that
    timed out may have committed all the same)."""

    def __init__(self) -> None:
        self.unanswered = False


class RunStore(Protocol):
    """Four operations on one record; every write after create() is conditional. Each waits
    at most `timeout` seconds, retries included, then raises a GoogleAPIError. update() and
    delete() commit `also` (other documents' writes) atomically with the record's write: one
    commit, applied whole or not at all. Two more reach the other documents of the ledger's
    database that ride in those commits (a job's status, a job's writes): `reference` names one
    for a StagedWrite, `read` reads one, both by its path."""

    def create(self, run_id: str, fields: Mapping[str, Any], *, timeout: float) -> datetime: ...
    def get(self, run_id: str, *, timeout: float) -> StoredRecord | None: ...
    def update(
        self,
        run_id: str,
        fields: Mapping[str, Any],
        *,
        if_updated_at: datetime,
        timeout: float,
        also: Sequence[StagedWrite] = (),
    ) -> datetime: ...
    def delete(
        self, run_id: str, *, if_updated_at: datetime, timeout: float, also: Sequence[StagedWrite] = ()
    ) -> None: ...
    def reference(self, path: str) -> firestore.DocumentReference: ...
    def read(self, path: str, *, timeout: float) -> StoredRecord | None: ...


def with_retries(
    timeout: float,
    send: Callable[[float], T],
    *,
    attempt_seconds: float | None = None,
    tries: Tries | None = None,
) -> T:
    """`send(seconds)` sends one RPC that may take `seconds`: `attempt_seconds` (by default
    ATTEMPT_SHARE of `timeout`), never more than what is left of `timeout`. It is sent again
    after each transient failure (a timeout included) as long as a whole attempt still fits,
    so the call ends within `timeout`, and a first attempt that hangs until its own timeout
    still leaves its retry a full attempt. The last failure is raised as it is. `tries`
    learns whether a try went unanswered."""
    share = max(attempt_seconds if attempt_seconds is not None else timeout * ATTEMPT_SHARE, 0.001)
    ends = time.monotonic() + timeout
    pause = FIRST_RETRY_PAUSE_SECONDS
    while True:
        try:
            return send(max(min(share, ends - time.monotonic()), 0.001))
        except TRANSIENT_ERRORS:
            if tries is not None:
                tries.unanswered = True
            if time.monotonic() + pause + share > ends:
                raise
        time.sleep(pause)
        pause = min(pause * 2, MAX_RETRY_PAUSE_SECONDS)


class FirestoreRunStore:
    """RunStore on one Firestore collection. Returns commit times, which are the fences.

    Every RPC may take ATTEMPT_SHARE of `deadline_seconds`, the longest deadline of the
    operations it serves (the ledger's store deadline), or what is left of the operation's
    deadline if that is less: an RPC sent late in an operation gets as long as the first one
    did, not a share of what is left. A share of what is left would shrink with every round
    trip, and a Firestore that answers in a third of the deadline would time out exactly the
    writes sent last (a takeover's), which commit all the same."""

    def __init__(
        self,
        client: firestore.Client,
        collection: str,
        *,
        deadline_seconds: float = MAX_STORE_DEADLINE_SECONDS,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self.attempt_seconds = deadline_seconds * ATTEMPT_SHARE

    def _document(self, run_id: str) -> firestore.DocumentReference:
        # The SDK's base classes type their results as "sync or awaitable"; this client is sync.
        return cast(firestore.DocumentReference, self._collection.document(run_id))

    def create(self, run_id: str, fields: Mapping[str, Any], *, timeout: float) -> datetime:
        """One create, sent as a BatchWrite of that single write: a record already there comes
        back as the write's status in the answer, not as a failed call. A duplicate is the
        common case of a refused create, and a failed call costs more on both ends (the
        client's exception path; the emulator logs a stack trace for each). A write status
        that means "no answer" is retried like a failed call."""

        def send(seconds: float) -> datetime:
            batch = BulkWriteBatch(self._client)
            batch.create(self._document(run_id), dict(fields))
            response = batch.commit(retry=None, timeout=seconds)
            status = response.status[0]
            if status.code == _ALREADY_EXISTS:
                raise RecordExists(run_id, unheard=tries.unanswered)
            if status.code != _OK:
                raise google_exceptions.from_grpc_status(status.code, status.message)  # type: ignore[no-untyped-call]
            return response.write_results[0].update_time  # type: ignore[no-any-return]

        tries = Tries()
        return with_retries(timeout, send, attempt_seconds=self.attempt_seconds, tries=tries)

    def get(self, run_id: str, *, timeout: float) -> StoredRecord | None:
        return self._get(self._document(run_id), timeout)

    def reference(self, path: str) -> firestore.DocumentReference:
        return self._client.document(path)

    def read(self, path: str, *, timeout: float) -> StoredRecord | None:
        return self._get(self.reference(path), timeout)

    def _get(self, document: firestore.DocumentReference, timeout: float) -> StoredRecord | None:
        snapshot = with_retries(
            timeout,
            lambda seconds: document.get(retry=None, timeout=seconds),
            attempt_seconds=self.attempt_seconds,
        )
        if not snapshot.exists:
            return None
        return StoredRecord(
            fields=snapshot.to_dict() or {},
            update_time=snapshot.update_time,
            read_time=snapshot.read_time,
            create_time=snapshot.create_time,
        )

    def update(
        self,
        run_id: str,
        fields: Mapping[str, Any],
        *,
        if_updated_at: datetime,
        timeout: float,
        also: Sequence[StagedWrite] = (),
    ) -> datetime:
        document = self._document(run_id)
        option = self._client.write_option(last_update_time=if_updated_at)
        if not also:
            result = self._conditional(
                run_id,
                timeout,
                lambda seconds: document.update(dict(fields), option=option, retry=None, timeout=seconds),
            )
            return result.update_time  # type: ignore[no-any-return]

        def send(seconds: float) -> datetime:
            batch = self._client.batch()
            batch.update(document, dict(fields), option=option)
            add_to_batch(batch, also)
            return batch.commit(retry=None, timeout=seconds)[0].update_time  # type: ignore[no-any-return]

        return self._conditional(run_id, timeout, send, carries_others=True)

    def delete(
        self, run_id: str, *, if_updated_at: datetime, timeout: float, also: Sequence[StagedWrite] = ()
    ) -> None:
        document = self._document(run_id)
        option = self._client.write_option(last_update_time=if_updated_at)

        def send(seconds: float) -> None:
            if not also:
                document.delete(option=option, retry=None, timeout=seconds)
                return
            batch = self._client.batch()
            batch.delete(document, option=option)
            add_to_batch(batch, also)
            batch.commit(retry=None, timeout=seconds)

        self._conditional(run_id, timeout, send, carries_others=bool(also))

    def _conditional(
        self, run_id: str, timeout: float, send: Callable[[float], T], *, carries_others: bool = False
    ) -> T:
        """Send a write conditioned on the record's update_time; a refusal is a StaleWrite.
        A commit carrying other documents' writes may be refused for one of those instead (a
        create of a document that exists is a Conflict; a value Firestore will not store, such
        as maps nested too deep, is an InvalidArgument: the record's own write never is), so
        the refusal's words go with it."""
        refusals: tuple[type[google_exceptions.GoogleAPIError], ...] = (
            google_exceptions.FailedPrecondition,
            google_exceptions.NotFound,
        )
        if carries_others:
            refusals += (google_exceptions.Conflict, google_exceptions.InvalidArgument)
        tries = Tries()
        try:
            return with_retries(timeout, send, attempt_seconds=self.attempt_seconds, tries=tries)
        except refusals as error:
            refusal = str(error) if carries_others else None
            raise StaleWrite(run_id, unheard=tries.unanswered, refusal=refusal) from None
