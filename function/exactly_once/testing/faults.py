"""What a test scripts for the in-memory store (memory_store.py): its clock, which moves only
when told, and the faults a call meets (a lost answer, no answer, an outage, a slow answer), each
reached as FirestoreRunStore's retry loop reaches it."""

from __future__ import annotations

import enum
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, TypeVar, cast

from google.api_core import exceptions as google_exceptions

from exactly_once.ledger.store import FIRST_RETRY_PAUSE_SECONDS, MAX_RETRY_PAUSE_SECONDS, TRANSIENT_ERRORS

T = TypeVar("T")


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
    # Every try sent within `seconds` of the call's first is refused at once with nothing
    # written, as by a Firestore down for that long; a later try reaches it.
    OUTAGE = "outage"


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    seconds: float = 0.0  # SLOW: how late the answer comes; OUTAGE: how long it lasts


LOST_ANSWER: Final = Fault(FaultKind.LOST_ANSWER)
NO_ANSWER: Final = Fault(FaultKind.NO_ANSWER)
UNAVAILABLE: Final = Fault(FaultKind.UNAVAILABLE)


def SLOW(seconds: float) -> Fault:
    """The answer comes `seconds` later on the store's ServerClock."""
    if seconds < 0:
        raise ValueError(f"SLOW({seconds}): a delay cannot be negative")
    return Fault(FaultKind.SLOW, seconds)


def OUTAGE(seconds: float) -> Fault:
    """Firestore refuses the call's tries for `seconds` on the store's ServerClock."""
    if seconds < 0:
        raise ValueError(f"OUTAGE({seconds}): an outage cannot be negative")
    return Fault(FaultKind.OUTAGE, seconds)


Hook = Callable[[], object]


@dataclass(frozen=True)
class _Scripted:
    fault: Fault | None = None
    before: Hook | None = None  # run just before the call's first try reaches the store
    after: Hook | None = None  # run just after it did (its commit, if it committed)


class ScriptedCalls:
    """The calls of a store in memory as FirestoreRunStore's retry loop (store.with_retries)
    makes them, on `clock`, each meeting what a test scripted for it, and counted: each try may
    take `attempt_seconds` of the call's deadline, a failed try is retried after the same pauses
    while a whole share still fits. So a scripted call costs the RPCs and the time the Firestore
    store's would."""

    def __init__(self, clock: ServerClock, attempt_seconds: float) -> None:
        self.clock = clock
        self.attempt_seconds = attempt_seconds
        self._lock = threading.Lock()
        self._scripts: dict[Operation, deque[_Scripted]] = {operation: deque() for operation in Operation}
        self._calls: Counter[Operation] = Counter()
        self._rpcs: Counter[Operation] = Counter()

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

    def reset_counts(self) -> None:
        with self._lock:
            self._calls.clear()
            self._rpcs.clear()

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
        began = self.clock.monotonic()
        ends = began + timeout
        pause = FIRST_RETRY_PAUSE_SECONDS
        unheard = False
        first = True
        while True:
            seconds = max(min(share, ends - self.clock.monotonic()), 0.001)
            with self._lock:
                self._rpcs[operation] += 1
            try:
                if self._down(scripted.fault, began):
                    raise google_exceptions.ServiceUnavailable("Firestore is down (scripted outage)")  # type: ignore[no-untyped-call]
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

    def _down(self, fault: Fault | None, began: float) -> bool:
        """Whether a scripted outage that began with the call's first try still lasts."""
        return (
            fault is not None
            and fault.kind is FaultKind.OUTAGE
            and self.clock.monotonic() < began + fault.seconds
        )

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
