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

What Firestore (as the emulator shows) does that one might not guess, and so does this store:

- A delete conditioned on an update_time is refused when the document does not exist, as a
  conditional update is: FAILED_PRECONDITION, "the stored version (0) does not match the
  required base version (...)" (versions are microseconds since the epoch). Either way the
  store raises StaleWrite; a conditional delete never succeeds on nothing.
- SERVER_TIMESTAMP is not the commit time. It is when the server took the request, to the
  millisecond: never after the write's update_time (on the emulator a few milliseconds before
  it), never before the previous commit's time cut to the millisecond, and the same for every
  field of one commit. This store writes the commit time cut to the millisecond.
- A write that leaves a document exactly as it was (same values, same types: 1 and 1.0
  differ) keeps the document's update_time, and that earlier time is the write's result.
  Commit times increase strictly only over writes that change something.
- A commit is refused for its first refused write, in the order sent: the record's own
  precondition (FAILED_PRECONDITION), a create of a document that exists (ALREADY_EXISTS,
  "entity already exists: ..." naming the document), an update of one that does not
  (NOT_FOUND), a value nested more than 20 maps or arrays deep or a field named like
  __name__ (INVALID_ARGUMENT). Nothing of a refused commit is applied.
- Writes of one commit apply in order, each to what the one before left: a document created
  and then updated in one commit holds both; deleted and then created, it is a new document.
- Increment adds int to int as an int (saturating at 64 bits) and anything with a double as
  a double; on a missing or non-numeric field (a bool included) it writes the operand.
  Maximum and Minimum keep the stored value when equal. ArrayUnion and ArrayRemove start
  from an empty array when the field holds none. A write through a field that holds no map
  replaces it with one; a DELETE_FIELD through one does nothing.

Not modelled: the limits on a document's size and a commit's writes, reference values, and
the emulator's refusal (INVALID_ARGUMENT) of an update after a delete of the same document
in one commit.

Faults (`MemoryRunStore.script`) are what FirestoreRunStore raises after its own retries,
reached the way its retry loop (store.with_retries) reaches them: each try may take the
store's share of the call's deadline, a failed try is retried after the same pauses while a
whole share still fits, and all of it on the ServerClock. So a scripted call costs the RPCs
and the time the Firestore store's would.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar, cast

from google.api_core import exceptions as google_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.field_path import parse_field_path

from exactly_once.audit.missed_runs import RecordReader
from exactly_once.audit.reads import AUDIT_FIELDS, READ_TIMEOUT_SECONDS, projected
from exactly_once.ledger.store import (
    ATTEMPT_SHARE,
    FIRST_RETRY_PAUSE_SECONDS,
    MAX_RETRY_PAUSE_SECONDS,
    MAX_STORE_DEADLINE_SECONDS,
    TRANSIENT_ERRORS,
    RecordExists,
    StaleWrite,
    StoredRecord,
)
from exactly_once.ledger.writes import StagedWrite, WriteKind

T = TypeVar("T")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND = timedelta(microseconds=1)
# Firestore refuses a value with more maps and arrays nested in it than this.
MAX_NESTING = 20
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class ServerClock:
    """Firestore's clock for a MemoryRunStore, and the monotonic clock of the code under test:
    both move together, and only when told (`advance`, `sleep`) or by a commit (one
    microsecond each, so commit times of one store increase strictly). Handing `monotonic`
    (and `sleep`) to the code under test makes a slow call cost it exactly the time it costs
    the store's leases. Thread-safe."""

    def __init__(self, start: datetime | None = None, *, monotonic_start: float = 1000.0) -> None:
        start = datetime.now(UTC) if start is None else start
        if start.tzinfo is None:
            raise ValueError("ServerClock: start must be an aware datetime")
        self._start = start.astimezone(UTC)
        self._monotonic_start = monotonic_start
        # Whole microseconds since the start: datetimes hold no finer, and no float drifts.
        self._micros = 0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Firestore's time: an aware UTC datetime."""
        with self._lock:
            return self._start + timedelta(microseconds=self._micros)

    def monotonic(self) -> float:
        """Stands in for time.monotonic(): seconds, moving exactly as now() does."""
        with self._lock:
            return self._monotonic_start + self._micros / 1_000_000

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"ServerClock: cannot go back {-seconds}s")
        with self._lock:
            self._micros += round(seconds * 1_000_000)

    def sleep(self, seconds: float) -> None:
        """Stands in for time.sleep(): the wait passes at once, on this clock."""
        self.advance(seconds)

    def tick(self) -> datetime:
        """Move one microsecond and return the new now: the time of a commit."""
        with self._lock:
            self._micros += 1
            return self._start + timedelta(microseconds=self._micros)


class Operation(enum.StrEnum):
    """The store's calls, as scripted and counted."""

    CREATE = "create"
    GET = "get"
    UPDATE = "update"
    DELETE = "delete"
    GET_ALL = "get_all"  # the audit readers' batched get (read_records)


class FaultKind(enum.StrEnum):
    # The first try commits (or is refused) and its answer is lost: it hangs until its own
    # timeout; the retry finds the write done, so the call raises RecordExists or StaleWrite
    # with unheard=True (a get just reads again).
    LOST_ANSWER = "lost_answer"
    # Every try commits (or is refused) and hangs until its timeout: DeadlineExceeded once no
    # retry fits, the write committed all the same.
    NO_ANSWER = "no_answer"
    # Every try is refused at once with nothing written, as a server that is down answers:
    # retried after the growing pauses until no try fits, then ServiceUnavailable.
    UNAVAILABLE = "unavailable"
    # The first try commits and its answer comes `seconds` later, beyond any try's timeout
    # (a paused process, a client slow to take the answer): the call returns normally then.
    SLOW = "slow"


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    seconds: float = 0.0  # SLOW: how late the answer comes


LOST_ANSWER: Final = Fault(FaultKind.LOST_ANSWER)
NO_ANSWER: Final = Fault(FaultKind.NO_ANSWER)
UNAVAILABLE: Final = Fault(FaultKind.UNAVAILABLE)


def SLOW(seconds: float) -> Fault:
    """The answer comes `seconds` later on the store's ServerClock."""
    if seconds < 0:
        raise ValueError(f"SLOW({seconds}): a delay cannot be negative")
    return Fault(FaultKind.SLOW, seconds)


Hook = Callable[[], object]


@dataclass(frozen=True)
class _Scripted:
    fault: Fault | None = None
    before: Hook | None = None  # run just before the call's first try reaches the store
    after: Hook | None = None  # run just after it did (its commit, if it committed)


@dataclass(frozen=True)
class _Document:
    fields: dict[str, Any]
    create_time: datetime
    update_time: datetime


@dataclass(frozen=True)
class _Pending:
    """A document as the writes of one commit have left it so far."""

    fields: dict[str, Any] | None
    version: int  # what an update_time precondition is compared with: 0 for no document
    created: bool = False  # made in this commit, so a new create_time


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


class MemoryRunStore:
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
        self.collection = collection
        self.clock = clock if clock is not None else ServerClock()
        # As FirestoreRunStore's: how long one try may take, which decides how many fit.
        self.attempt_seconds = deadline_seconds * ATTEMPT_SHARE
        self._lock = threading.Lock()
        self._documents: dict[str, _Document] = {}
        self._scripts: dict[Operation, deque[_Scripted]] = {operation: deque() for operation in Operation}
        self._calls: Counter[Operation] = Counter()
        self._rpcs: Counter[Operation] = Counter()
        self._observers: list[CommitObserver] = []
        self._naming = _NAMING_CLIENT

    # -- RunStore -------------------------------------------------------------------------

    def create(self, run_id: str, fields: Mapping[str, Any], *, timeout: float) -> datetime:
        path = self.record_path(run_id)
        writes = [(path, _only(_helpers.pbs_for_create(path, dict(fields))))]

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
        writes = [(path, _only(_helpers.pbs_for_update(path, dict(fields), option))), *_staged(also)]

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
        writes = [(path, _helpers.pb_for_delete(path, option)), *_staged(also)]

        def attempt(unheard: bool) -> None:
            try:
                self._commit(writes)
            except google_exceptions.GoogleAPIError as error:
                raise _stale(run_id, error, unheard=unheard, carries_others=bool(also)) from None

        self._call(Operation.DELETE, timeout, attempt)

    # -- faults and counts ----------------------------------------------------------------

    def script(
        self,
        operation: Operation | str,
        fault: Fault | None = None,
        *,
        before: Hook | None = None,
        after: Hook | None = None,
    ) -> None:
        """What the next unscripted call of `operation` meets: `fault`, and hooks run just
        before and just after its first try reaches the store (a rival's write landing
        between this call's RPCs). Calls take their scripts in the order given."""
        with self._lock:
            self._scripts[Operation(operation)].append(_Scripted(fault, before, after))

    def scripted(self, operation: Operation | str) -> int:
        """How many scripts of `operation` no call has taken yet."""
        with self._lock:
            return len(self._scripts[Operation(operation)])

    @property
    def calls(self) -> Counter[Operation]:
        """Calls made of each operation (a copy)."""
        with self._lock:
            return Counter(self._calls)

    @property
    def rpcs(self) -> Counter[Operation]:
        """Tries sent for each operation (a copy): what FirestoreRunStore would send, retries
        included."""
        with self._lock:
            return Counter(self._rpcs)

    def observe(self, observer: CommitObserver) -> None:
        """Call `observer` after every applied commit (a refused one applies nothing), with
        each document it wrote, in the order written, outside the store's lock: a journal of
        what really committed, whatever the caller heard of it."""
        self._observers.append(observer)

    def reset_counts(self) -> None:
        with self._lock:
            self._calls.clear()
            self._rpcs.clear()

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
            return self._read(path, _firestore_time(self.clock.now()))

    def records(self) -> dict[str, StoredRecord]:
        """Every document of the store's collection (run records, job locks), by id."""
        prefix = f"{self.collection}/"
        with self._lock:
            read_time = _firestore_time(self.clock.now())
            return {
                path.removeprefix(prefix): record
                for path in sorted(self._documents)
                if path.startswith(prefix) and "/" not in path.removeprefix(prefix)
                if (record := self._read(path, read_time)) is not None
            }

    def commit(self, writes: Sequence[StagedWrite]) -> list[datetime]:
        """Another client's batch commit, applied whole or refused whole (the GoogleAPIError
        Firestore answers); each write's result time. For seeding documents and rivals."""
        return self._commit(_staged(writes))

    def read_records(self, run_ids: Sequence[str], *, timeout: float) -> dict[str, StoredRecord]:
        """The records that exist among `run_ids`, in one batched get (one read time), as the
        audit reads them: scriptable as GET_ALL, one try of the whole `timeout`."""

        def attempt(unheard: bool) -> dict[str, StoredRecord]:
            with self._lock:
                read_time = _firestore_time(self.clock.now())
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
            read_time = _firestore_time(self.clock.now())
            before = {path: self._read(path, read_time) for path in paths} if self._observers else {}
            times = self._apply_commit(writes)
            read_time = _firestore_time(self.clock.now())
            written = dict(zip((path for path, _ in writes), times, strict=True))
            after = {path: self._read(path, read_time) for path in before}
            applied = [AppliedWrite(path, before[path], after[path], written[path]) for path in before]
        for observer in list(self._observers):
            observer(applied)
        return times

    def _apply_commit(self, writes: Sequence[tuple[str, Any]]) -> list[datetime]:
        """The commit itself, under the store's lock (held by the caller)."""
        moment = self.clock.tick()
        commit_time = _firestore_time(moment)
        request_time = _firestore_time(moment.replace(microsecond=moment.microsecond // 1000 * 1000))
        pending: dict[str, _Pending] = {}
        for path, write in writes:
            if path not in pending:
                stored = self._documents.get(path)
                pending[path] = (
                    _Pending(None, 0)
                    if stored is None
                    else _Pending(stored.fields, _version(stored.update_time))
                )
            pending[path] = _apply(pending[path], path, write._pb, request_time, _version(commit_time))
        result_times: dict[str, datetime] = {}
        for path, after in pending.items():
            before = self._documents.get(path)
            if after.fields is None:
                self._documents.pop(path, None)
                result_times[path] = commit_time
            elif after.created or before is None:
                self._documents[path] = _Document(after.fields, commit_time, commit_time)
                result_times[path] = commit_time
            elif _canonical(after.fields, exact=True) == _canonical(before.fields, exact=True):
                result_times[path] = before.update_time  # unchanged: Firestore keeps the time
            else:
                self._documents[path] = _Document(after.fields, before.create_time, commit_time)
                result_times[path] = commit_time
        return [result_times[path] for path, _ in writes]

    def _call(
        self,
        operation: Operation,
        timeout: float,
        attempt: Callable[[bool], T],
        *,
        attempt_seconds: float | None = None,
    ) -> T:
        """One call as FirestoreRunStore's retry loop (store.with_retries) makes it, on the
        ServerClock: `attempt(unheard)` is one try reaching the store, and `unheard` says
        whether an earlier try of the call went unanswered."""
        with self._lock:
            queue = self._scripts[operation]
            scripted = queue.popleft() if queue else _Scripted()
            self._calls[operation] += 1
        share = max(self.attempt_seconds if attempt_seconds is None else attempt_seconds, 0.001)
        ends = self.clock.monotonic() + timeout
        pause = FIRST_RETRY_PAUSE_SECONDS
        unheard = False
        first = True
        while True:
            seconds = max(min(share, ends - self.clock.monotonic()), 0.001)
            with self._lock:
                self._rpcs[operation] += 1
            try:
                return self._try(
                    scripted if first else _Scripted(scripted.fault), first, seconds, attempt, unheard
                )
            except TRANSIENT_ERRORS:
                unheard = True
                if self.clock.monotonic() + pause + share > ends:
                    raise
            first = False
            self.clock.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_PAUSE_SECONDS)

    def _try(
        self, scripted: _Scripted, first: bool, seconds: float, attempt: Callable[[bool], T], unheard: bool
    ) -> T:
        """One try under its script: it reaches the store (or not), then its answer comes,
        late, or never (a TRANSIENT_ERRORS error after `seconds`, the try's timeout)."""
        kind = scripted.fault.kind if scripted.fault is not None else None
        if scripted.before is not None:
            scripted.before()
        result: T | None = None
        error: Exception | None = None
        if kind is not FaultKind.UNAVAILABLE:
            try:
                result = attempt(unheard)
            except Exception as refused:  # an answer like any other, given after the hook
                error = refused
        if scripted.after is not None:
            scripted.after()
        if kind is FaultKind.UNAVAILABLE:
            raise google_exceptions.ServiceUnavailable("Firestore is unavailable (scripted)")  # type: ignore[no-untyped-call]
        if kind is FaultKind.NO_ANSWER or (kind is FaultKind.LOST_ANSWER and first):
            self.clock.advance(seconds)
            raise google_exceptions.DeadlineExceeded("the answer was lost (scripted)")  # type: ignore[no-untyped-call]
        if kind is FaultKind.SLOW and first and scripted.fault is not None:
            self.clock.advance(scripted.fault.seconds)
        if error is not None:
            raise error
        return cast(T, result)


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


def _staged(writes: Sequence[StagedWrite]) -> list[tuple[str, Any]]:
    """(path, Write protobuf) for each write, as writes.add_to_batch puts them in a batch."""
    staged: list[tuple[str, Any]] = []
    for write in writes:
        path = write.document.path
        data = dict(write.data)
        if write.kind is WriteKind.CREATE:
            pbs = _helpers.pbs_for_create(path, data)
        elif write.kind is WriteKind.SET and write.merge:
            pbs = _helpers.pbs_for_set_with_merge(path, data, True)
        elif write.kind is WriteKind.SET:
            pbs = _helpers.pbs_for_set_no_merge(path, data)
        elif write.kind is WriteKind.UPDATE:
            pbs = _helpers.pbs_for_update(path, data, write.option)
        else:
            pbs = [_helpers.pb_for_delete(path, write.option)]
        staged.extend((path, pb) for pb in pbs)
    return staged


def _only(pbs: Sequence[Any]) -> Any:
    """The one Write protobuf the client library makes of a create, set or update."""
    (pb,) = pbs
    return pb


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


def _apply(pending: _Pending, path: str, write: Any, request_time: datetime, commit_version: int) -> _Pending:
    """One Write protobuf applied to `pending` as the server applies it, or its refusal."""
    _check_precondition(pending, path, write)
    if write.WhichOneof("operation") == "delete":
        return _Pending(None, 0)
    given = cast(dict[str, Any], _helpers.decode_dict(write.update.fields, None))
    if write.HasField("update_mask"):
        fields = copy.deepcopy(pending.fields) if pending.fields is not None else {}
        for api_path in write.update_mask.field_paths:
            parts = parse_field_path(api_path)
            found, value = _lookup(given, parts)
            if found:
                _put(fields, parts, value)
            else:
                _remove(fields, parts)
    else:
        fields = given
    for transform in write.update_transforms:
        _transform(fields, parse_field_path(transform.field_path), transform, request_time)
    _validate(fields)
    if pending.fields is None:
        return _Pending(fields, commit_version, created=True)
    return _Pending(fields, pending.version, created=pending.created)


def _check_precondition(pending: _Pending, path: str, write: Any) -> None:
    if not write.HasField("current_document"):
        return
    condition = write.current_document
    if condition.WhichOneof("condition_type") == "exists":
        if condition.exists and pending.fields is None:
            raise google_exceptions.NotFound(f"no entity to update: {path}")  # type: ignore[no-untyped-call]
        if not condition.exists and pending.fields is not None:
            raise google_exceptions.AlreadyExists(f"entity already exists: {path}")  # type: ignore[no-untyped-call]
        return
    required = condition.update_time.seconds * 1_000_000 + condition.update_time.nanos // 1000
    stored = pending.version if pending.fields is not None else 0
    if stored != required:
        message = f"the stored version ({stored}) does not match the required base version ({required})"
        raise google_exceptions.FailedPrecondition(message)  # type: ignore[no-untyped-call]


def _transform(fields: dict[str, Any], parts: list[str], transform: Any, request_time: datetime) -> None:
    kind = transform.WhichOneof("transform_type")
    found, current = _lookup(fields, parts)
    if kind == "set_to_server_value":
        value: Any = request_time
    elif kind == "increment":
        operand = _helpers.decode_value(transform.increment, None)
        if not (found and _is_number(current)):
            value = operand
        elif isinstance(current, int) and isinstance(operand, int):
            value = min(max(current + operand, _INT64_MIN), _INT64_MAX)
        else:
            value = float(current) + float(cast(float, operand))
    elif kind in ("maximum", "minimum"):
        operand = _helpers.decode_value(getattr(transform, kind), None)
        if not (found and _is_number(current)):
            value = operand
        elif kind == "maximum":
            value = operand if operand > current else current
        else:
            value = operand if operand < current else current
    elif kind == "append_missing_elements":
        value = list(current) if found and isinstance(current, list) else []
        for element in _elements(transform.append_missing_elements):
            if not any(_canonical(element) == _canonical(held) for held in value):
                value.append(element)
    elif kind == "remove_all_from_array":
        removed = [_canonical(element) for element in _elements(transform.remove_all_from_array)]
        held = current if found and isinstance(current, list) else []
        value = [element for element in held if _canonical(element) not in removed]
    else:
        raise google_exceptions.InvalidArgument(f"unknown field transform {kind}")  # type: ignore[no-untyped-call]
    _put(fields, parts, value)


def _elements(array: Any) -> list[Any]:
    """The values of an ArrayValue protobuf."""
    return [_helpers.decode_value(element, None) for element in array.values]


def _validate(fields: Mapping[str, Any]) -> None:
    for name, value in fields.items():
        if _reserved(name):
            raise google_exceptions.InvalidArgument(f"field name {name} is reserved")  # type: ignore[no-untyped-call]
        if _nesting(value) > MAX_NESTING:
            message = f"Property {name} contains an invalid nested entity."
            raise google_exceptions.InvalidArgument(message)  # type: ignore[no-untyped-call]
        _validate_names(value)


def _validate_names(value: Any) -> None:
    if isinstance(value, dict):
        for name, inner in value.items():
            if _reserved(name):
                raise google_exceptions.InvalidArgument(f"field name '{name}' is reserved.")  # type: ignore[no-untyped-call]
            _validate_names(inner)
    elif isinstance(value, list):
        for inner in value:
            _validate_names(inner)


def _reserved(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _nesting(value: Any) -> int:
    """Maps and arrays nested in `value`, itself included."""
    if isinstance(value, dict):
        return 1 + max((_nesting(inner) for inner in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_nesting(inner) for inner in value), default=0)
    return 0


def _lookup(fields: Mapping[str, Any], parts: Sequence[str]) -> tuple[bool, Any]:
    value: Any = fields
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _put(fields: dict[str, Any], parts: Sequence[str], value: Any) -> None:
    """Set the field at `parts`; a map is made of whatever lies on the way."""
    for part in parts[:-1]:
        inner = fields.get(part)
        if not isinstance(inner, dict):
            inner = fields[part] = {}
        fields = inner
    fields[parts[-1]] = value


def _remove(fields: dict[str, Any], parts: Sequence[str]) -> None:
    """Remove the field at `parts`; nothing when a map on the way is missing."""
    for part in parts[:-1]:
        inner = fields.get(part)
        if not isinstance(inner, dict):
            return
        fields = inner
    fields.pop(parts[-1], None)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _canonical(value: Any, *, exact: bool = False) -> Any:
    """A value as Firestore compares it: numbers by value (1 == 1.0), anything else by type
    and value; `exact` tells numbers' types apart too, as "did this write change anything"
    does."""
    if isinstance(value, dict):
        return ("map", tuple(sorted((key, _canonical(inner, exact=exact)) for key, inner in value.items())))
    if isinstance(value, list):
        return ("array", tuple(_canonical(inner, exact=exact) for inner in value))
    if _is_number(value) and not exact:
        return ("number", value)
    return (type(value).__name__, value)


def _version(moment: datetime) -> int:
    """A commit time as Firestore's document version: microseconds since the epoch."""
    return (moment - _EPOCH) // _ONE_MICROSECOND


def _firestore_time(moment: datetime) -> datetime:
    """`moment` as Firestore hands times back (DatetimeWithNanoseconds, UTC)."""
    return cast(datetime, _helpers.decode_value(_helpers.encode_value(moment), None))
