"""An in-memory RunStore that behaves, observably, as FirestoreRunStore on Firestore does.

Why it exists: a model-based test of the ledger wants thousands of interleavings a second,
faults placed between two particular RPCs, and time that moves only when told; the emulator
gives none of these. A job's own tests want to run it as the function does, in milliseconds and
without credentials (testing/job_environment.py). Why it can be trusted:
tests/function/ledger/test_store_conformance.py holds it and FirestoreRunStore on the emulator
to the same tests. Where the two disagree, the emulator is right and this module changes.

How it stays faithful: every write is turned into Firestore's own Write protobuf by the client
library's own code, the code FirestoreRunStore's batches run (update()'s dotted keys, a merge's
field mask, where DELETE_FIELD is allowed, sentinels turned into field transforms, values as
Firestore stores them: a tuple is an array, a datetime is UTC). This module plays only the
server's part: preconditions, masks, transforms, commit times, refusals.

What Firestore does that one might not guess, which this store does too, is
server_writes.py's to list.

Faults (`MemoryRunStore.script`) are what FirestoreRunStore raises after its own retries,
reached the way its retry loop (store.with_retries) reaches them: each try may take the
store's share of the call's deadline, a failed try is retried after the same pauses while a
whole share still fits, and all of it on the ServerClock. So a scripted call costs the RPCs
and the time the Firestore store's would.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

from google.api_core import exceptions as google_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers

from exactly_once.audit.missed_runs import RecordReader
from exactly_once.audit.reads import AUDIT_FIELDS, READ_TIMEOUT_SECONDS, projected
from exactly_once.ledger.store import (
    ATTEMPT_SHARE,
    MAX_STORE_DEADLINE_SECONDS,
    RecordExists,
    StaleWrite,
    StoredRecord,
)
from exactly_once.ledger.writes import StagedWrite
from exactly_once.testing.faults import (
    LOST_ANSWER,
    NO_ANSWER,
    SLOW,
    UNAVAILABLE,
    Fault,
    FaultKind,
    Operation,
    ScriptedCalls,
    ServerClock,
)
from exactly_once.testing.server_writes import (
    Pending,
    apply_write,
    as_written,
    canonical,
    firestore_time,
    only_write,
    version_of,
)

# The store, and what a test scripts for it (faults.py), from one module.
__all__ = [
    "LOST_ANSWER",
    "NO_ANSWER",
    "SLOW",
    "UNAVAILABLE",
    "AppliedWrite",
    "Fault",
    "FaultKind",
    "MemoryRunStore",
    "Operation",
    "ServerClock",
    "offline_client",
    "stored_record_reader",
]

T = TypeVar("T")


@dataclass(frozen=True)
class _Document:
    fields: dict[str, Any]
    create_time: datetime
    update_time: datetime


@dataclass(frozen=True)
class AppliedWrite:
    """One document as a commit found it and left it: what an observer of the store sees
    (`MemoryRunStore.observe`). A write that changed nothing is reported too, with `after`
    keeping the earlier update_time."""

    path: str
    before: StoredRecord | None
    after: StoredRecord | None  # None: deleted, or still absent
    time: datetime  # the write's result time: the commit's, or the kept one of a write that changed nothing


CommitObserver = Callable[[Sequence[AppliedWrite]], object]


def offline_client(project: str = "memory-store") -> firestore.Client:
    """A client that only names documents (a StagedWrite's reference, JobStatuses' documents)
    for a MemoryRunStore, which addresses them by path: it never sends an RPC."""
    return firestore.Client(project=project, credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]


_NAMING_CLIENT: Final = offline_client()


class MemoryRunStore(ScriptedCalls):
    """A RunStore on one collection of an in-memory database, as FirestoreRunStore on
    Firestore behaves (the module's docstring lists what the emulator showed: a conditional
    delete of a missing record is refused; SERVER_TIMESTAMP is the request's millisecond, not
    the commit time; a write that changes nothing keeps the update_time, so it fences
    nothing). Other documents (job status, job locks, writes that rode in a commit) live in
    the same database, by path. One lock guards it all; scripted hooks and clock movements run
    outside it, so a hook may call the store.

    Time passes only when the test moves the clock: writes between two moves share their
    server timestamps' millisecond, so a write whose only change is a server timestamp (a
    lease renewal) changes nothing, as it would on Firestore within one millisecond."""

    def __init__(
        self,
        collection: str = "scheduler_runs",
        *,
        clock: ServerClock | None = None,
        deadline_seconds: float = MAX_STORE_DEADLINE_SECONDS,
    ) -> None:
        # As FirestoreRunStore's: how long one try may take, which decides how many fit.
        super().__init__(clock if clock is not None else ServerClock(), deadline_seconds * ATTEMPT_SHARE)
        self.collection = collection
        self._documents: dict[str, _Document] = {}
        self._observers: list[CommitObserver] = []
        self._naming = _NAMING_CLIENT

    # -- RunStore -------------------------------------------------------------------------

    def create(self, run_id: str, fields: Mapping[str, Any], *, timeout: float) -> datetime:
        path = self.record_path(run_id)
        writes = [(path, only_write(_helpers.pbs_for_create(path, dict(fields))))]

        def attempt(unheard: bool) -> datetime:
            try:
                return self._commit(writes)[0]
            except google_exceptions.AlreadyExists:
                raise RecordExists(run_id, unheard=unheard) from None

        return self._call(Operation.CREATE, timeout, attempt)

    def get(self, run_id: str, *, timeout: float) -> StoredRecord | None:
        return self.read(self.record_path(run_id), timeout=timeout)

    def reference(self, path: str) -> firestore.DocumentReference:
        return self._naming.document(path)

    def read(self, path: str, *, timeout: float) -> StoredRecord | None:
        """Any document of the database, as get() reads a record (scripted and counted as GET)."""
        return self._call(Operation.GET, timeout, lambda unheard: self.snapshot(path))

    def update(
        self,
        run_id: str,
        fields: Mapping[str, Any],
        *,
        if_updated_at: datetime,
        timeout: float,
        also: Sequence[StagedWrite] = (),
    ) -> datetime:
        path = self.record_path(run_id)
        option = _helpers.LastUpdateOption(if_updated_at)
        writes = [(path, only_write(_helpers.pbs_for_update(path, dict(fields), option))), *as_written(also)]

        def attempt(unheard: bool) -> datetime:
            try:
                return self._commit(writes)[0]
            except google_exceptions.GoogleAPIError as error:
                raise _stale(run_id, error, unheard=unheard, carries_others=bool(also)) from None

        return self._call(Operation.UPDATE, timeout, attempt)

    def delete(
        self, run_id: str, *, if_updated_at: datetime, timeout: float, also: Sequence[StagedWrite] = ()
    ) -> None:
        path = self.record_path(run_id)
        option = _helpers.LastUpdateOption(if_updated_at)
        writes = [(path, _helpers.pb_for_delete(path, option)), *as_written(also)]

        def attempt(unheard: bool) -> None:
            try:
                self._commit(writes)
            except google_exceptions.GoogleAPIError as error:
                raise _stale(run_id, error, unheard=unheard, carries_others=bool(also)) from None

        self._call(Operation.DELETE, timeout, attempt)

    # -- faults and counts ----------------------------------------------------------------

    def observe(self, observer: CommitObserver) -> None:
        """Call `observer` after every applied commit (a refused one applies nothing), with
        each document it wrote, in the order written, outside the store's lock: a journal of
        what really committed, whatever the caller heard of it."""
        self._observers.append(observer)

    # -- the test's own view: no faults, not counted ---------------------------------------

    def record_path(self, run_id: str) -> str:
        return f"{self.collection}/{run_id}"

    def document(self, path: str) -> dict[str, Any] | None:
        """The fields of the document at `path` (DocumentReference.path), or None."""
        record = self.snapshot(path)
        return None if record is None else dict(record.fields)

    def snapshot(self, path: str) -> StoredRecord | None:
        """The document at `path` with its times, read now."""
        with self._lock:
            return self._read(path, firestore_time(self.clock.now()))

    def records(self) -> dict[str, StoredRecord]:
        """Every document of the store's collection (run records, job locks), by id."""
        prefix = f"{self.collection}/"
        with self._lock:
            read_time = firestore_time(self.clock.now())
            return {
                path.removeprefix(prefix): record
                for path in sorted(self._documents)
                if path.startswith(prefix) and "/" not in path.removeprefix(prefix)
                if (record := self._read(path, read_time)) is not None
            }

    def commit(self, writes: Sequence[StagedWrite]) -> list[datetime]:
        """Another client's batch commit, applied whole or refused whole (the GoogleAPIError
        Firestore answers); each write's result time. For seeding documents and rivals."""
        return self._commit(as_written(writes))

    def read_records(self, run_ids: Sequence[str], *, timeout: float) -> dict[str, StoredRecord]:
        """The records that exist among `run_ids`, in one batched get (one read time), as the
        audit reads them: scriptable as GET_ALL, one try of the whole `timeout`."""

        def attempt(unheard: bool) -> dict[str, StoredRecord]:
            with self._lock:
                read_time = firestore_time(self.clock.now())
                found = {run_id: self._read(self.record_path(run_id), read_time) for run_id in run_ids}
            return {run_id: record for run_id, record in found.items() if record is not None}

        return self._call(Operation.GET_ALL, timeout, attempt, attempt_seconds=timeout)

    # -- the server -----------------------------------------------------------------------

    def _read(self, path: str, read_time: datetime) -> StoredRecord | None:
        document = self._documents.get(path)
        if document is None:
            return None
        return StoredRecord(
            fields=copy.deepcopy(document.fields),
            update_time=document.update_time,
            read_time=read_time,
            create_time=document.create_time,
        )

    def _commit(self, writes: Sequence[tuple[str, Any]]) -> list[datetime]:
        """Apply `writes` (path, Write protobuf) as one commit, or raise the GoogleAPIError of
        the first refused one with nothing applied; then tell the observers what it wrote."""
        paths = list(dict.fromkeys(path for path, _ in writes))
        with self._lock:
            read_time = firestore_time(self.clock.now())
            before = {path: self._read(path, read_time) for path in paths} if self._observers else {}
            times = self._apply_commit(writes)
            read_time = firestore_time(self.clock.now())
            written = dict(zip((path for path, _ in writes), times, strict=True))
            after = {path: self._read(path, read_time) for path in before}
            applied = [AppliedWrite(path, before[path], after[path], written[path]) for path in before]
        for observer in list(self._observers):
            observer(applied)
        return times

    def _apply_commit(self, writes: Sequence[tuple[str, Any]]) -> list[datetime]:
        """The commit itself, under the store's lock (held by the caller)."""
        moment = self.clock.tick()
        commit_time = firestore_time(moment)
        request_time = firestore_time(moment.replace(microsecond=moment.microsecond // 1000 * 1000))
        pending: dict[str, Pending] = {}
        for path, write in writes:
            if path not in pending:
                stored = self._documents.get(path)
                pending[path] = (
                    Pending(None, 0)
                    if stored is None
                    else Pending(stored.fields, version_of(stored.update_time))
                )
            pending[path] = apply_write(pending[path], path, write._pb, request_time, version_of(commit_time))
        result_times: dict[str, datetime] = {}
        for path, after in pending.items():
            before = self._documents.get(path)
            if after.fields is None:
                self._documents.pop(path, None)
                result_times[path] = commit_time
            elif after.created or before is None:
                self._documents[path] = _Document(after.fields, commit_time, commit_time)
                result_times[path] = commit_time
            elif canonical(after.fields, exact=True) == canonical(before.fields, exact=True):
                result_times[path] = before.update_time  # unchanged: Firestore keeps the time
            else:
                self._documents[path] = _Document(after.fields, before.create_time, commit_time)
                result_times[path] = commit_time
        return [result_times[path] for path, _ in writes]


def stored_record_reader(
    store: MemoryRunStore,
    *,
    timeout: float = READ_TIMEOUT_SECONDS,
    field_paths: Sequence[str] | None = AUDIT_FIELDS,
) -> RecordReader:
    """The audit's RecordReader on `store`, as audit.reads.firestore_reader is on Firestore:
    run id -> StoredRecord projected to `field_paths`, with Firestore's read time to judge
    leases on."""

    def read(run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
        return {
            run_id: dataclasses.replace(record, fields=projected(record.fields, field_paths))
            for run_id, record in store.read_records(run_ids, timeout=timeout).items()
        }

    return read


def _stale(
    run_id: str, error: google_exceptions.GoogleAPIError, *, unheard: bool, carries_others: bool
) -> Exception:
    """What FirestoreRunStore._conditional makes of a refused commit: a StaleWrite for the
    refusals it knows (with Firestore's words when the commit carried other writes), the
    error itself for any other."""
    refusals: tuple[type[google_exceptions.GoogleAPIError], ...] = (
        google_exceptions.FailedPrecondition,
        google_exceptions.NotFound,
    )
    if carries_others:
        refusals += (google_exceptions.Conflict, google_exceptions.InvalidArgument)
    if not isinstance(error, refusals):
        return error
    return StaleWrite(run_id, unheard=unheard, refusal=str(error) if carries_others else None)
